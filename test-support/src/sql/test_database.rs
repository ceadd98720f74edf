//! The database a SQL provider's tests run on, as the whole tests of
//! [`provider_tests`](super::provider_tests), [`admin_tests`](super::admin_tests) and
//! [`round_trips`](super::round_trips) take it: where it is, and the SQL that differs per
//! database to set up a test's table, read it back and remove it. Each provider's test binary
//! declares those tests with the macros here, so that each test function is written once.

use std::future::Future;
use std::time::Duration;

use shedlock_sql::{SqlBackend, SqlLockProvider, SqlLockProviderBuilder};
use sqlx::Pool;

use super::conformance_harness::PlantRecords;
use super::provider_tests::{StoredRows, pool, unique};

/// The holder name of the nodes [`TestDatabase::node`] makes.
pub const HOLDER: &str = "rust-node";

/// The database of a test database's backend (`Postgres` for PostgreSQL).
pub type DbOf<D> = <<D as TestDatabase>::Backend as SqlBackend>::Database;

/// The pool type of a test database's backend.
pub type PoolOf<D> = Pool<DbOf<D>>;

/// A database a provider's tests run on: a server every test shares, each test on tables of its
/// own, or a new database file for each test.
// The futures are awaited where they are made, never sent to another task: no `Send` bound.
pub trait TestDatabase {
    /// The provider's backend.
    type Backend: SqlBackend;
    /// How rows are written there as Java ShedLock writes them.
    type Kit: PlantRecords<Backend = Self::Backend>;
    /// Starts the names of the tables this provider's tests make (`my`, `pg`), so that a table
    /// a failed test left behind says whose it is.
    const TABLE_PREFIX: &'static str;
    /// Names the database cannot store, which the provider must refuse as names (PostgreSQL's
    /// text cannot hold NUL).
    const UNSTORABLE_NAMES: &'static [&'static str];
    /// SQL for the database's UTC time now, as the provider stores times.
    const NOW: &'static str;
    /// SQL for the database's UTC time an hour from now, as the provider stores times.
    const IN_AN_HOUR: &'static str;

    /// The URL a provider connects to.
    fn url(&self) -> String;
    /// Runs SQL built by the test itself.
    fn exec(&self, sql: &str) -> impl Future<Output = ()>;
    /// Reads `table`'s rows back.
    fn rows(&self, table: &str) -> impl Future<Output = Box<dyn StoredRows>>;

    /// A pool of the test's own, for setup and inspection SQL.
    fn pool(&self) -> impl Future<Output = PoolOf<Self>> {
        let url = self.url();
        async move { pool(&url).await }
    }

    /// A table name no other test uses, for a test about `purpose`.
    fn new_table(&self, purpose: &str) -> String {
        unique(&format!("{}_{purpose}", Self::TABLE_PREFIX))
    }

    /// A builder for a node on `table`, holder `holder`.
    fn builder(&self, table: &str, holder: &str) -> SqlLockProviderBuilder<Self::Backend> {
        SqlLockProvider::<Self::Backend>::builder()
            .table_name(table)
            .holder(holder)
    }

    /// A node with its own connections on `table`, holder [`HOLDER`], which creates the table if
    /// it is missing, with the fencing column when `fencing`.
    fn node(
        &self,
        table: &str,
        fencing: bool,
    ) -> impl Future<Output = SqlLockProvider<Self::Backend>> {
        let builder = self.builder(table, HOLDER);
        let builder = if fencing {
            builder.create_table_with_fencing_if_missing()
        } else {
            builder.create_table_if_missing()
        };
        let url = self.url();
        async move { builder.connect(url).await.unwrap() }
    }

    /// A node on `table` as it is, without creating it.
    fn node_on_existing(
        &self,
        table: &str,
        holder: &str,
    ) -> impl Future<Output = SqlLockProvider<Self::Backend>> {
        let (builder, url) = (self.builder(table, holder), self.url());
        async move { builder.connect(url).await.unwrap() }
    }

    /// Drops `table`.
    fn drop_table(&self, table: &str) -> impl Future<Output = ()> {
        let sql = format!("DROP TABLE {table}");
        async move { self.exec(&sql).await }
    }
}

/// A database server (PostgreSQL, MySQL or MariaDB) that every test shares, each on tables of
/// its own.
pub trait TestServer: TestDatabase {
    /// The URL schemes the provider accepts: the server's own, then its other name
    /// (`postgresql`, `mariadb`).
    const SCHEMES: [&'static str; 2];
    /// The server's default port.
    const PORT: u16;
    /// The character the provider's DDL quotes identifiers with.
    const QUOTE: char;
    /// How the server says that a table does not exist.
    const NO_SUCH_TABLE: &'static str;
    /// How long a statement that waits for a row lock may still wait on the server once a
    /// client with an operation timeout of 800 ms has stopped waiting for it.
    const ROW_LOCK_WAIT_OUTLIVES: Duration;

    /// Whether the table `table` exists.
    fn has_table(&self, table: &str) -> impl Future<Output = bool>;
}

/// Declares a `#[tokio::test]` for each whole test `module::test` of this crate's `sql` module,
/// run on `$database`, under the whole test's name.
#[macro_export]
macro_rules! sql_tests_on {
    ($database:expr; $($module:ident::$test:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $test() {
                $crate::sql::$module::$test(&$database).await;
            }
        )+
    };
}

/// Declares the lock tests of [`provider_tests`](crate::sql::provider_tests) on `$database`, a
/// [`TestDatabase`](crate::sql::test_database::TestDatabase) made anew for each test: with
/// `server`, also those that SQLite, whose database is a file of the test's own, runs in ways of
/// its own.
#[macro_export]
macro_rules! sql_provider_tests {
    ($database:expr) => {
        $crate::sql_tests_on!(
            $database;
            provider_tests::release_keeps_the_lock_until_at_least_and_extend_moves_it,
            provider_tests::server_time_ignores_node_clocks_and_client_time_uses_them,
            provider_tests::lock_statements_run_outside_the_callers_transaction,
        );
    };
    ($database:expr, server) => {
        $crate::sql_provider_tests!($database);
        $crate::sql_tests_on!(
            $database;
            provider_tests::one_statement_acquire_creates_the_row_excludes_others_and_releases,
            provider_tests::racing_first_acquires_of_a_new_name_let_exactly_one_in,
            provider_tests::an_expired_holder_cannot_release_or_extend_the_next_holders_lock,
            provider_tests::a_missing_table_is_an_error_that_shows_how_to_create_it,
            provider_tests::a_column_name_given_twice_is_refused_and_no_table_created,
            provider_tests::errors_on_a_dropped_table_name_the_statement_and_the_acquire_fails_closed,
            provider_tests::an_unreachable_server_is_an_error_within_the_connect_timeout_without_the_password,
            provider_tests::urls_of_other_backends_are_refused_by_their_scheme_before_connecting,
        );
    };
}

/// Declares the operator's-view tests of [`admin_tests`](crate::sql::admin_tests) on
/// `$database`, a [`TestDatabase`](crate::sql::test_database::TestDatabase) made anew for each
/// test: with `server`, also those that SQLite runs in ways of its own.
#[macro_export]
macro_rules! sql_admin_tests {
    ($database:expr) => {
        $crate::sql_tests_on!(
            $database;
            admin_tests::listing_pages_through_a_prefix_literally_in_name_order,
            admin_tests::held_released_and_at_least_locks_show_their_state,
            admin_tests::inspect_matches_the_listing_and_refuses_names_locks_refuse,
            admin_tests::the_configured_table_and_column_names_are_used,
            admin_tests::a_java_row_lists_and_is_freed_by_its_own_acquisition_only,
            admin_tests::a_thousand_names_list_in_ten_pages_of_a_hundred,
            admin_tests::client_time_admin_judges_by_the_nodes_clock,
        );
    };
    ($database:expr, server) => {
        $crate::sql_admin_tests!($database);
        $crate::sql_tests_on!(
            $database;
            admin_tests::force_unlock_frees_exactly_the_acquisition_it_names_with_fencing,
            admin_tests::a_force_unlock_that_waits_gives_up_within_the_operation_timeout,
        );
    };
}
