//! [`MongoLockProviderBuilder`]: the provider's settings, their checks, and the three ways to
//! finish (connect, connect lazily, or build on the application's client).

use std::sync::Arc;
use std::time::Duration;

use mongodb::Client;
use mongodb::bson::Document;
use mongodb::options::{Acknowledgment, CollectionOptions, ReadConcern, WriteConcern};
use shedlock_core::raw::{ProviderSettings, check_positive_duration, invalid_setting};
use shedlock_core::{ErrorKind, LockError, Operation};

use crate::failure::{connect_error, kind_of};
use crate::storage::MongoStorage;
use crate::{
    DEFAULT_COLLECTION, DEFAULT_SERVER_SELECTION_TIMEOUT, MongoLockProvider, PROVIDER, credentials,
    url,
};

/// Settings for a [`MongoLockProvider`]; finish with [`connect`](Self::connect),
/// [`connect_lazy`](Self::connect_lazy) or [`build`](Self::build).
#[derive(Debug, Clone)]
pub struct MongoLockProviderBuilder {
    database: Option<String>,
    collection: String,
    settings: ProviderSettings,
    server_selection_timeout: Duration,
    write_concern: Option<WriteConcern>,
    read_concern: ReadConcern,
}

impl Default for MongoLockProviderBuilder {
    fn default() -> Self {
        Self {
            database: None,
            collection: DEFAULT_COLLECTION.to_owned(),
            settings: ProviderSettings::default(),
            server_selection_timeout: DEFAULT_SERVER_SELECTION_TIMEOUT,
            write_concern: None,
            read_concern: ReadConcern::majority(),
        }
    }
}

impl MongoLockProviderBuilder {
    /// The database holding the lock collection, instead of the one in the URL's path. One of
    /// the two must name it: the provider never picks a database by itself.
    pub fn database(mut self, database: impl Into<String>) -> Self {
        self.database = Some(database.into());
        self
    }

    /// The lock collection (default `shedLock`, ShedLock's). Java nodes sharing locks must use
    /// the same one.
    pub fn collection(mut self, collection: impl Into<String>) -> Self {
        self.collection = collection.into();
        self
    }

    /// The readable part of `lockedBy`, before each acquisition's own `#<id>`; see
    /// [`ProviderSettings::with_holder`].
    pub fn holder(self, holder: impl Into<String>) -> Self {
        Self {
            settings: self.settings.with_holder(holder),
            ..self
        }
    }

    /// The longest one lock operation may take (default 5 s), also sent as each command's
    /// `maxTimeMS` and as the default write concern's `wtimeout`, so the server gives up too;
    /// see [`ProviderSettings::with_operation_timeout`].
    pub fn operation_timeout(self, timeout: Duration) -> Self {
        Self {
            settings: self.settings.with_operation_timeout(timeout),
            ..self
        }
    }

    /// How long the driver looks for a usable server, and waits to connect (default 3 s):
    /// past it an operation fails with an error saying the server is unreachable.
    pub fn server_selection_timeout(mut self, timeout: Duration) -> Self {
        self.server_selection_timeout = timeout;
        self
    }

    /// The write concern of every lock command (default `w: "majority"` with `wtimeout` = the
    /// operation timeout): an acquisition acknowledged with less may be lost in a failover and
    /// taken again by another node.
    pub fn write_concern(mut self, write_concern: WriteConcern) -> Self {
        self.write_concern = Some(write_concern);
        self
    }

    /// The read concern of what the provider reads (default `"majority"`): the collection check
    /// of [`connect`](Self::connect). The lock commands themselves are writes, which always
    /// act on the primary's current documents; their durability is the write concern's.
    pub fn read_concern(mut self, read_concern: ReadConcern) -> Self {
        self.read_concern = read_concern;
        self
    }

    /// Connects to `url` (`mongodb://[user:password@]host[:port][,...]/[database][?options]`
    /// or `mongodb+srv://...`; any other scheme is refused before anything connects) and
    /// checks, within the operation timeout, that the server is MongoDB 4.2 or later, that
    /// the lock collection can be read, and that it is an ordinary collection (not a view, a
    /// capped or a time-series collection) when the credentials may list collections. Fails
    /// with a [`LockError::Backend`] naming the redacted URL otherwise.
    pub async fn connect(self, url: &str) -> Result<MongoLockProvider, LockError> {
        let provider = self.connect_lazy(url).await?;
        if let Err(error) = provider.check_server().await {
            // The client this made goes with the refusal: shut it down here rather than leave
            // its cleanup to the runtime's end (see `MongoLockProvider::shutdown`).
            provider.shutdown().await;
            return Err(error);
        }
        Ok(provider)
    }

    /// Like [`connect`](Self::connect) without contacting the server: an application can start
    /// while MongoDB is down, and each lock operation fails (within the timeouts) until it
    /// answers. Only a `mongodb+srv://` URL is resolved here, through DNS.
    pub async fn connect_lazy(self, url: &str) -> Result<MongoLockProvider, LockError> {
        self.validate_timeouts()?;
        url::check_url_scheme(url)?;
        let shown = credentials::redact(url);
        let mut options = url::parse(url, &shown, self.settings.operation_timeout()).await?;
        options.server_selection_timeout = Some(self.server_selection_timeout);
        options.connect_timeout = Some(self.server_selection_timeout);
        let database = match (&self.database, &options.default_database) {
            (Some(database), _) | (None, Some(database)) => database.clone(),
            (None, None) => {
                return Err(connect_error(
                    ErrorKind::Configuration,
                    format!(
                        "{shown} names no database: put it in the URL's path \
                     (mongodb://host/<database>) or call .database(...)"
                    ),
                ));
            }
        };
        let client = Client::with_options(options).map_err(|error| {
            connect_error(
                kind_of(Operation::Connect, &error),
                format!(
                    "{shown} is not a usable MongoDB connection string: {}",
                    credentials::scrub(&error.to_string(), url)
                ),
            )
        })?;
        self.finish(&client, &database, shown, true)
    }

    /// Uses a client the application already has (its connection settings and timeouts are
    /// the client's; the operation timeout still bounds every lock operation). The database is
    /// the one set here, else the client's default database.
    ///
    /// The client stays the application's: [`MongoLockProvider::shutdown`] leaves it alone, and
    /// the application calls [`Client::shutdown`] itself before its runtime ends.
    pub fn build(self, client: &Client) -> Result<MongoLockProvider, LockError> {
        self.validate_timeouts()?;
        let database = match (&self.database, client.default_database()) {
            (Some(database), _) => database.clone(),
            (None, Some(database)) => database.name().to_owned(),
            (None, None) => {
                return Err(connect_error(
                    ErrorKind::Configuration,
                    "the given client has no default database: call .database(...)".to_owned(),
                ));
            }
        };
        self.finish(
            client,
            &database,
            "a client given by the application".to_owned(),
            false,
        )
    }

    fn validate_timeouts(&self) -> Result<(), LockError> {
        self.settings.check(PROVIDER)?;
        check_positive_duration(
            PROVIDER,
            "server selection timeout",
            self.server_selection_timeout,
        )
    }

    fn finish(
        self,
        client: &Client,
        database: &str,
        shown: String,
        owns_client: bool,
    ) -> Result<MongoLockProvider, LockError> {
        check_database_name(database)?;
        check_collection_name(database, &self.collection)?;
        let operation_timeout = self.settings.operation_timeout();
        let write_concern = self.write_concern.unwrap_or_else(|| {
            WriteConcern::builder()
                .w(Acknowledgment::Majority)
                .w_timeout(operation_timeout)
                .build()
        });
        let options = CollectionOptions::builder()
            .write_concern(write_concern)
            .read_concern(self.read_concern)
            .build();
        let collection = client
            .database(database)
            .collection_with_options::<Document>(&self.collection, options);
        let storage = Arc::new(MongoStorage {
            collection,
            operation_timeout,
            target: format!("{shown} (collection {database}.{})", self.collection),
            owns_client,
        });
        Ok(MongoLockProvider::on_storage(
            storage,
            Some(self.settings.into_holder()),
            operation_timeout,
        ))
    }
}

/// MongoDB's rules for database names, checked here so a bad name is refused with the rule
/// rather than by the first lock command.
fn check_database_name(database: &str) -> Result<(), LockError> {
    let rule = if database.is_empty() {
        "it must not be empty"
    } else if let Some(bad) = database.chars().find(|c| "/\\. \"$\0".contains(*c)) {
        return Err(invalid_setting(
            PROVIDER,
            "database name",
            database,
            &format!("MongoDB database names cannot contain {bad:?}"),
        ));
    } else if database.len() >= 64 {
        "MongoDB database names must be shorter than 64 bytes"
    } else {
        return Ok(());
    };
    Err(invalid_setting(PROVIDER, "database name", database, rule))
}

/// MongoDB's rules for collection names.
fn check_collection_name(database: &str, collection: &str) -> Result<(), LockError> {
    let rule = if collection.is_empty() {
        "it must not be empty"
    } else if collection.contains('$') || collection.contains('\0') {
        "MongoDB collection names cannot contain '$' or NUL"
    } else if collection.starts_with("system.") {
        "names starting with \"system.\" are reserved by MongoDB"
    } else if database.len() + 1 + collection.len() > 255 {
        "with the database name it must fit MongoDB's 255-byte namespace"
    } else {
        return Ok(());
    };
    Err(invalid_setting(
        PROVIDER,
        "collection name",
        collection,
        rule,
    ))
}
