//! The lock table's configured names.

use crate::identifier::{Dialect, Identifier, IdentifierError, TableName};

/// One of the lock table's columns, to rename it with [`LockTable::with_column`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Column {
    /// The lock name, the primary key (ShedLock: `name VARCHAR(64)`).
    Name,
    /// When the lock frees itself (ShedLock: `lock_until`).
    LockUntil,
    /// When the current or last holder took it (ShedLock: `locked_at`).
    LockedAt,
    /// Who took it (ShedLock: `locked_by VARCHAR(255)`).
    LockedBy,
    /// The optional fencing counter, an extension Java ShedLock neither needs nor touches.
    FencingToken,
}

impl Column {
    /// ShedLock's default name for the column (`fencing_token` for the extension).
    pub fn default_name(self) -> &'static str {
        match self {
            Column::Name => "name",
            Column::LockUntil => "lock_until",
            Column::LockedAt => "locked_at",
            Column::LockedBy => "locked_by",
            Column::FencingToken => "fencing_token",
        }
    }
}

/// The lock table: its name and the names of its columns.
///
/// Defaults are ShedLock's: table `shedlock`, columns `name`, `lock_until`, `locked_at`,
/// `locked_by`, plus `fencing_token`, which is used only if the table has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockTable {
    table: TableName,
    name: Identifier,
    lock_until: Identifier,
    locked_at: Identifier,
    locked_by: Identifier,
    fencing_token: Identifier,
}

impl Default for LockTable {
    fn default() -> Self {
        let column = |c: Column| Identifier::new("column", c.default_name()).unwrap();
        Self {
            table: TableName::parse("shedlock").unwrap(),
            name: column(Column::Name),
            lock_until: column(Column::LockUntil),
            locked_at: column(Column::LockedAt),
            locked_by: column(Column::LockedBy),
            fencing_token: column(Column::FencingToken),
        }
    }
}

impl LockTable {
    /// ShedLock's table and columns under another table name: `shedlock_jobs` or
    /// `locks.shedlock` (schema-qualified).
    pub fn new(table: &str) -> Result<Self, IdentifierError> {
        Ok(Self {
            table: TableName::parse(table)?,
            ..Self::default()
        })
    }

    /// Renames one column, for a table whose columns differ from ShedLock's defaults.
    pub fn with_column(mut self, column: Column, name: &str) -> Result<Self, IdentifierError> {
        let id = Identifier::new(&format!("column {}", column.default_name()), name)?;
        match column {
            Column::Name => self.name = id,
            Column::LockUntil => self.lock_until = id,
            Column::LockedAt => self.locked_at = id,
            Column::LockedBy => self.locked_by = id,
            Column::FencingToken => self.fencing_token = id,
        }
        Ok(self)
    }

    /// The table itself, refused when two of its columns share a name (compared as SQL
    /// compares unquoted names, ignoring ASCII case): each column must be its own, or every
    /// statement would read and write one column for two. Checked when a provider is built,
    /// not per rename, so names can be swapped one rename at a time.
    pub fn checked(self) -> Result<Self, IdentifierError> {
        const COLUMNS: [Column; 5] = [
            Column::Name,
            Column::LockUntil,
            Column::LockedAt,
            Column::LockedBy,
            Column::FencingToken,
        ];
        for (index, first) in COLUMNS.iter().enumerate() {
            for second in &COLUMNS[index + 1..] {
                let name = self.column(*second).as_str();
                if self.column(*first).as_str().eq_ignore_ascii_case(name) {
                    return Err(IdentifierError {
                        what: format!(
                            "column {} (also the name given to column {})",
                            second.default_name(),
                            first.default_name()
                        ),
                        given: name.to_owned(),
                        rule: "each column of the lock table needs a name of its own",
                    });
                }
            }
        }
        Ok(self)
    }

    /// The table name.
    pub fn table(&self) -> &TableName {
        &self.table
    }

    /// The configured name of `column`.
    pub fn column(&self, column: Column) -> &Identifier {
        match column {
            Column::Name => &self.name,
            Column::LockUntil => &self.lock_until,
            Column::LockedAt => &self.locked_at,
            Column::LockedBy => &self.locked_by,
            Column::FencingToken => &self.fencing_token,
        }
    }

    /// `column`, quoted for SQL text.
    pub fn quoted(&self, dialect: Dialect, column: Column) -> String {
        self.column(column).quoted(dialect)
    }

    /// The table name, quoted for SQL text.
    pub fn quoted_table(&self, dialect: Dialect) -> String {
        self.table.quoted(dialect)
    }

    /// The table and every column, quoted for SQL text, in this order: the table, then
    /// `name`, `lock_until`, `locked_at`, `locked_by` and `fencing_token` as configured. What
    /// each dialect's statements start from.
    pub fn quoted_names(&self, dialect: Dialect) -> [String; 6] {
        [
            self.quoted_table(dialect),
            self.quoted(dialect, Column::Name),
            self.quoted(dialect, Column::LockUntil),
            self.quoted(dialect, Column::LockedAt),
            self.quoted(dialect, Column::LockedBy),
            self.quoted(dialect, Column::FencingToken),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_columns_with_one_name_are_refused_and_a_swap_is_not() {
        let clash = LockTable::default()
            .with_column(Column::LockedAt, "LOCK_UNTIL")
            .unwrap()
            .checked()
            .unwrap_err();
        assert_eq!(
            clash.to_string(),
            "column locked_at (also the name given to column lock_until) \"LOCK_UNTIL\" is not \
             accepted: each column of the lock table needs a name of its own"
        );
        let swapped = LockTable::default()
            .with_column(Column::LockedAt, "lock_until")
            .and_then(|t| t.with_column(Column::LockUntil, "locked_at"))
            .unwrap()
            .checked()
            .unwrap();
        assert_eq!(swapped.column(Column::LockUntil).as_str(), "locked_at");
        assert!(LockTable::default().checked().is_ok());
    }

    #[test]
    fn defaults_are_shedlocks_and_columns_can_be_renamed() {
        let table = LockTable::default();
        assert_eq!(table.table().to_string(), "shedlock");
        assert_eq!(table.column(Column::LockUntil).as_str(), "lock_until");
        let renamed = LockTable::new("ops.locks")
            .unwrap()
            .with_column(Column::LockedBy, "owner")
            .unwrap();
        assert_eq!(renamed.quoted(Dialect::MySql, Column::LockedBy), "`owner`");
        assert_eq!(renamed.quoted_table(Dialect::Postgres), "\"ops\".\"locks\"");
        let error = LockTable::default()
            .with_column(Column::LockedAt, "locked at")
            .unwrap_err();
        assert!(error.to_string().contains("column locked_at"), "{error}");
    }
}
