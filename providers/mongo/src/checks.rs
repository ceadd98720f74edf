//! What [`connect`](crate::MongoLockProviderBuilder::connect) checks on the server before
//! handing out a provider: a new enough server, a readable lock collection, and an ordinary
//! collection rather than a view, a capped or a time-series one.

use mongodb::bson::doc;
use shedlock_core::{ErrorKind, LockError, Operation};

use crate::failure::{connect_error, kind_of};
use crate::{MongoLockProvider, PROVIDER};

/// The oldest server wire version with pipeline updates and `$$NOW` (MongoDB 4.2).
const MIN_WIRE_VERSION: i64 = 8;

impl MongoLockProvider {
    /// `hello` for the server's wire version, then a read of the collection (a point lookup of
    /// `_id: ""`, a name no lock can have): proves the server is new enough and the
    /// credentials may read the locks.
    pub(crate) async fn check_server(&self) -> Result<(), LockError> {
        let storage = &*self.storage;
        let target = &storage.target;
        let check = async {
            let hello = storage
                .collection
                .client()
                .database("admin")
                .run_command(doc! { "hello": 1 })
                .await?;
            let probe = storage
                .collection
                .find_one(doc! { "_id": "" })
                .projection(doc! { "_id": 1 })
                .max_time(self.operation_timeout)
                .await;
            Ok::<_, mongodb::error::Error>((hello, probe))
        };
        let (hello, probe) = match tokio::time::timeout(self.operation_timeout, check).await {
            Ok(Ok(answers)) => answers,
            Ok(Err(error)) => {
                // A server that refused the credentials answered: it is running and reachable.
                let message = if matches!(
                    *error.kind,
                    mongodb::error::ErrorKind::Authentication { .. }
                ) {
                    format!(
                        "MongoDB at {target} refused the credentials: check the user name and \
                         password in the URL, and its authSource (the database the user is \
                         defined in)"
                    )
                } else {
                    format!("could not reach MongoDB at {target}: is it running and reachable?")
                };
                return Err(LockError::backend(
                    kind_of(Operation::Connect, &error),
                    PROVIDER,
                    Operation::Connect,
                    "",
                    message,
                    error,
                ));
            }
            Err(_) => {
                return Err(connect_error(
                    ErrorKind::Unreachable,
                    format!(
                        "MongoDB at {target} did not answer within {:?}: is it running and reachable?",
                        self.operation_timeout
                    ),
                ));
            }
        };
        let wire_version = hello
            .get("maxWireVersion")
            .and_then(|version| match version {
                mongodb::bson::Bson::Int32(version) => Some(i64::from(*version)),
                mongodb::bson::Bson::Int64(version) => Some(*version),
                _ => None,
            })
            .unwrap_or(0);
        if wire_version < MIN_WIRE_VERSION {
            return Err(connect_error(
                ErrorKind::Configuration,
                format!(
                    "the server at {target} reports wire version {wire_version}; the provider needs \
                 MongoDB 4.2 or later (wire version {MIN_WIRE_VERSION}: pipeline updates and $$NOW)"
                ),
            ));
        }
        probe.map(|_| ()).map_err(|error| {
            LockError::backend(
                kind_of(Operation::Connect, &error),
                PROVIDER,
                Operation::Connect,
                "",
                format!("could not read the lock collection at {target}"),
                error,
            )
        })?;
        self.check_collection_kind().await
    }

    /// Refuses a lock collection that cannot keep locks: a view (it takes no writes), a capped
    /// collection (it drops its oldest documents when full, and with them locks still held), a
    /// time-series collection. One `listCollections` for the collection's name; a user not
    /// allowed to list collections is not refused for that, and the lock commands decide.
    async fn check_collection_kind(&self) -> Result<(), LockError> {
        let storage = &*self.storage;
        let collection = &storage.collection;
        let listing = collection
            .client()
            .database(collection.namespace().db.as_str());
        let command = doc! {
            "listCollections": 1,
            "filter": { "name": collection.name() },
        };
        let answer = tokio::time::timeout(self.operation_timeout, listing.run_command(command));
        let listed = match answer.await {
            Ok(Ok(listed)) => listed,
            // Refused (not authorized to list collections) or not answered: nothing to judge.
            Ok(Err(_)) | Err(_) => return Ok(()),
        };
        let first = listed
            .get_document("cursor")
            .ok()
            .and_then(|cursor| cursor.get_array("firstBatch").ok())
            .and_then(|batch| batch.first())
            .and_then(mongodb::bson::Bson::as_document);
        let Some(spec) = first else {
            // Not created yet: the first acquire creates an ordinary collection.
            return Ok(());
        };
        let kind = spec.get_str("type").unwrap_or("collection");
        let capped = spec
            .get_document("options")
            .ok()
            .and_then(|options| options.get("capped"))
            .and_then(mongodb::bson::Bson::as_bool)
            .unwrap_or(false);
        let rule = match kind {
            "view" => "is a view, which takes no writes",
            "timeseries" => "is a time-series collection, which cannot keep one document per lock",
            "collection" if capped => {
                "is a capped collection, which drops its oldest documents when it is full, and \
                 with them locks still held, which other nodes would then take"
            }
            "collection" => return Ok(()),
            _ => "is not an ordinary collection",
        };
        Err(connect_error(
            ErrorKind::Configuration,
            format!(
                "{} {rule}: the lock collection must be an ordinary collection; nothing was \
             written (give the provider another with MongoLockProviderBuilder::collection)",
                storage.target
            ),
        ))
    }
}
