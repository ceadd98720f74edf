//! The PostgreSQL provider and TLS, in whichever build is tested: with a TLS feature on (the
//! default), locking over TLS and its refusals; with none (`--no-default-features`, as
//! `ci/test.sh` runs it too), the error that names the feature to turn on. One target for both,
//! so each build links one binary for it.

#[cfg(any(feature = "tls-rustls", feature = "tls-rustls-native-roots"))]
mod with_tls_features;
#[cfg(not(any(feature = "tls-rustls", feature = "tls-rustls-native-roots")))]
mod without_tls_features;
