//! TLS to ZooKeeper (`zk+tls://`): the CA and client certificate, checked when the provider is
//! built, and the handshake that explains a session the client could not open.
//!
//! zookeeper-client retries a failed connection until its deadline and keeps the reason (an
//! untrusted certificate, a wrong host name, a refused client certificate) to its debug log, so
//! without this the only error would be "no session within 5s". When a TLS session cannot be
//! opened, [`Tls::explain`] repeats the handshake itself with the same trust and identity and
//! reports what rustls said.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use shedlock_core::ErrorKind;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout_at};
use tokio_rustls::TlsConnector;
use zookeeper_client::TlsOptions;

/// ZooKeeper's client port, which zookeeper-client assumes for a server given without one.
const DEFAULT_PORT: u16 = 2181;

/// How long [`Tls::explain`] waits after a finished handshake for the server to refuse the
/// client's certificate: with TLS 1.3 the server judges it after the client's side is done,
/// and answers a refusal with an alert within a round trip.
const REFUSAL_WAIT: Duration = Duration::from_millis(500);

/// The PEM text given to the builder: the CA, and the client's certificate and key. Its
/// `Debug` shows the key's presence, never the key.
#[derive(Clone, Default)]
pub(crate) struct TlsPem {
    pub(crate) root_certificate: Option<Vec<u8>>,
    pub(crate) client_identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl fmt::Debug for TlsPem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsPem")
            .field(
                "root_certificate",
                &self
                    .root_certificate
                    .as_ref()
                    .map(|pem| format!("{} bytes of PEM", pem.len())),
            )
            .field(
                "client_certificate",
                &self.client_identity.as_ref().map(|_| "set, key ***"),
            )
            .finish()
    }
}

impl TlsPem {
    /// Whether anything was set, which only a `zk+tls://` connect string uses.
    pub(crate) fn is_set(&self) -> bool {
        self.root_certificate.is_some() || self.client_identity.is_some()
    }
}

/// TLS settings checked and ready: the client's options and the same trust for [`explain`].
///
/// [`explain`]: Tls::explain
#[derive(Clone)]
pub(crate) struct Tls {
    options: TlsOptions,
    connector: TlsConnector,
    presents_certificate: bool,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Tls { .. }")
    }
}

impl Tls {
    /// Checks `pem` and prepares both the client's options and the explaining handshake's;
    /// `Err` says what is wrong with which PEM. The CA is required: ZooKeeper ensembles carry
    /// certificates of a private CA, and zookeeper-client trusts no roots of its own.
    pub(crate) fn new(pem: &TlsPem) -> Result<Self, String> {
        // zookeeper-client builds its rustls configuration on the process's default crypto
        // provider. It turns on rustls' aws-lc-rs and this crate ring, and with two providers
        // and no default rustls would panic: ring is made the default unless one was chosen.
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let Some(ca) = &pem.root_certificate else {
            return Err(
                "zk+tls:// needs the CA that signed the servers' certificates: give it \
                        (PEM) to ZookeeperLockProviderBuilder::tls_root_certificate"
                    .to_owned(),
            );
        };
        let ca_text = std::str::from_utf8(ca)
            .map_err(|_| "the TLS root certificate is not PEM text (it is not UTF-8)".to_owned())?;
        let mut roots = RootCertStore::empty();
        for certificate in CertificateDer::pem_slice_iter(ca) {
            let certificate = certificate
                .map_err(|e| format!("the TLS root certificate is not valid PEM: {e}"))?;
            roots
                .add(certificate)
                .map_err(|e| format!("the TLS root certificate cannot be used as a CA: {e}"))?;
        }
        if roots.is_empty() {
            return Err("the TLS root certificate holds no CERTIFICATE in PEM".to_owned());
        }
        let crls = CertificateRevocationListDer::pem_slice_iter(ca)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| {
                format!("a revocation list in the TLS root certificate is invalid: {e}")
            })?;
        let mut options = TlsOptions::new()
            .with_pem_ca(ca_text)
            .map_err(|e| format!("the TLS root certificate was refused: {e}"))?;

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            roots.into(),
            provider.clone(),
        )
        .with_crls(crls)
        .build()
        .map_err(|e| format!("the TLS root certificate cannot verify servers: {e}"))?;
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("rustls has no TLS version in common with ring: {e}"))?
            .with_webpki_verifier(verifier);
        let config = match &pem.client_identity {
            None => config.with_no_client_auth(),
            Some((certificate, key)) => {
                let chain = CertificateDer::pem_slice_iter(certificate)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| format!("the TLS client certificate is not valid PEM: {e}"))?;
                if chain.is_empty() {
                    return Err("the TLS client certificate holds no CERTIFICATE in PEM".to_owned());
                }
                // The key's own text never goes into a message.
                let private_key = PrivateKeyDer::from_pem_slice(key).map_err(|_| {
                    "the TLS client key holds no private key in PEM (PKCS#8, PKCS#1 or SEC1)"
                        .to_owned()
                })?;
                let (certificate_text, key_text) =
                    match (std::str::from_utf8(certificate), std::str::from_utf8(key)) {
                        (Ok(certificate), Ok(key)) => (certificate, key),
                        _ => {
                            return Err("the TLS client certificate or key is not UTF-8".to_owned());
                        }
                    };
                options = options
                    .with_pem_identity(certificate_text, key_text)
                    .map_err(|_| "the TLS client certificate or key was refused".to_owned())?;
                config
                    .with_client_auth_cert(chain, private_key)
                    .map_err(|e| format!("the TLS client key does not fit its certificate: {e}"))?
            }
        };
        Ok(Self {
            options,
            connector: TlsConnector::from(Arc::new(config)),
            presents_certificate: pem.client_identity.is_some(),
        })
    }

    /// The options for zookeeper-client's connector.
    pub(crate) fn options(&self) -> TlsOptions {
        self.options.clone()
    }

    /// Why no TLS session could be opened with `servers` (`host:port,...[/chroot]`), and what
    /// kind of failure that is, found by a handshake of its own with each server in turn until
    /// `deadline`: the first handshake that fails, or that the server ends at once, is the
    /// answer; `None` when every server that answered completed a handshake (the cause lies
    /// beyond TLS).
    ///
    /// A server that refuses the client's certificate (or its absence) refused the client's
    /// credentials: [`ErrorKind::CredentialsRefused`]. A host name TLS cannot verify is
    /// [`ErrorKind::Configuration`]. Every other failure, the server's certificate refused
    /// by the client included, is a failed handshake, before any request: [`ErrorKind::Unreachable`].
    pub(crate) async fn explain(
        &self,
        servers: &str,
        deadline: Instant,
    ) -> Option<(ErrorKind, String)> {
        let hosts = servers.split('/').next().unwrap_or_default();
        let mut unreachable = Vec::new();
        for server in hosts.split(',').map(str::trim) {
            let Some((host, port)) = host_and_port(server) else {
                continue;
            };
            let stream = match timeout_at(deadline, TcpStream::connect((host, port))).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(error)) => {
                    unreachable.push(format!("{server}: {error}"));
                    continue;
                }
                Err(_) => {
                    unreachable.push(format!("{server}: no TCP connection in time"));
                    continue;
                }
            };
            let Ok(name) = ServerName::try_from(host.to_owned()) else {
                return Some((
                    ErrorKind::Configuration,
                    format!("{host:?} is not a host name TLS can verify"),
                ));
            };
            let mut tls = match timeout_at(deadline, self.connector.connect(name, stream)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(error)) => {
                    return Some((
                        refusal_kind(&error),
                        format!(
                            "the TLS handshake with {server} failed: {error}{}",
                            self.hint(&error)
                        ),
                    ));
                }
                Err(_) => {
                    unreachable.push(format!("{server}: no TLS handshake in time"));
                    continue;
                }
            };
            let wait = deadline.min(Instant::now() + REFUSAL_WAIT);
            match timeout_at(wait, tls.read(&mut [0; 1])).await {
                Ok(Err(error)) => {
                    return Some((
                        refusal_kind(&error),
                        format!(
                            "{server} refused the TLS connection: {error}{}",
                            self.hint(&error)
                        ),
                    ));
                }
                Ok(Ok(0)) => {
                    return Some((
                        ErrorKind::Unreachable,
                        format!("{server} closed the TLS connection right after the handshake"),
                    ));
                }
                // Bytes before any request, or silence: the server accepted the handshake.
                Ok(Ok(_)) | Err(_) => {}
            }
        }
        (!unreachable.is_empty()).then(|| {
            (
                ErrorKind::Unreachable,
                format!("cannot reach {}", unreachable.join(", ")),
            )
        })
    }
}

impl Tls {
    /// What to do about a server's alert that refuses the client's certificate, or nothing.
    fn hint(&self, error: &std::io::Error) -> &'static str {
        if !refuses_client_certificate(error) {
            return "";
        }
        if self.presents_certificate {
            " (the server did not accept the client certificate: it must be signed by a CA the \
             server trusts, for client authentication)"
        } else {
            " (the server asks for a client certificate: give one to \
             ZookeeperLockProviderBuilder::tls_client_certificate)"
        }
    }
}

/// Whether `error` is the server's alert refusing the client's certificate, or its absence.
fn refuses_client_certificate(error: &std::io::Error) -> bool {
    use rustls::AlertDescription::{
        AccessDenied, BadCertificate, CertificateRequired, CertificateUnknown, UnknownCA,
        UnsupportedCertificate,
    };
    let alert = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    matches!(
        alert,
        Some(rustls::Error::AlertReceived(
            BadCertificate
                | CertificateRequired
                | CertificateUnknown
                | UnknownCA
                | UnsupportedCertificate
                | AccessDenied,
        ))
    )
}

/// The kind of a failed handshake or of the server's refusal right after one: the client's
/// certificate refused is refused credentials; anything else left no connection to send on.
fn refusal_kind(error: &std::io::Error) -> ErrorKind {
    if refuses_client_certificate(error) {
        ErrorKind::CredentialsRefused
    } else {
        ErrorKind::Unreachable
    }
}

/// `host[:port]` or `[v6]:port` as zookeeper-client reads it; `None` for what it refuses.
fn host_and_port(server: &str) -> Option<(&str, u16)> {
    let (host, port) = match server.strip_prefix('[') {
        Some(bracketed) => {
            let (host, rest) = bracketed.split_once(']')?;
            (host, rest.strip_prefix(':'))
        }
        None => match server.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (server, None),
        },
    };
    let port = match port {
        None | Some("") => DEFAULT_PORT,
        Some(port) => port.parse().ok().filter(|port| *port != 0)?,
    };
    (!host.is_empty()).then_some((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_client_certificate_is_refused_credentials() {
        let alert = |description| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                rustls::Error::AlertReceived(description),
            )
        };
        for description in [
            rustls::AlertDescription::BadCertificate,
            rustls::AlertDescription::CertificateRequired,
            rustls::AlertDescription::UnknownCA,
        ] {
            assert_eq!(
                refusal_kind(&alert(description)),
                ErrorKind::CredentialsRefused,
                "{description:?}"
            );
        }
        assert_eq!(
            refusal_kind(&alert(rustls::AlertDescription::HandshakeFailure)),
            ErrorKind::Unreachable
        );
        let untrusted = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        );
        assert_eq!(refusal_kind(&untrusted), ErrorKind::Unreachable);
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert_eq!(refusal_kind(&reset), ErrorKind::Unreachable);
    }

    #[test]
    fn servers_are_read_as_zookeeper_client_reads_them() {
        assert_eq!(host_and_port("zk1:2282"), Some(("zk1", 2282)));
        assert_eq!(host_and_port("zk1"), Some(("zk1", 2181)));
        assert_eq!(host_and_port("[::1]:2282"), Some(("::1", 2282)));
        assert_eq!(host_and_port("[::1]"), Some(("::1", 2181)));
        assert_eq!(host_and_port("zk1:0"), None);
        assert_eq!(host_and_port(":2282"), None);
    }

    #[test]
    fn the_ca_is_required_and_pem_is_checked_without_quoting_the_key() {
        let error = Tls::new(&TlsPem::default()).unwrap_err();
        assert!(error.contains("tls_root_certificate"), "{error}");
        let not_pem = TlsPem {
            root_certificate: Some(b"not a certificate".to_vec()),
            client_identity: None,
        };
        assert_eq!(
            Tls::new(&not_pem).unwrap_err(),
            "the TLS root certificate holds no CERTIFICATE in PEM"
        );
        let pem = TlsPem {
            root_certificate: Some(
                b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".to_vec(),
            ),
            client_identity: Some((b"cert".to_vec(), b"secret-key-text".to_vec())),
        };
        let debug = format!("{pem:?}");
        assert!(!debug.contains("secret-key-text"), "{debug}");
        assert!(Tls::new(&pem).is_err());
    }
}
