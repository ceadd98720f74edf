//! Table and column names: validated once, quoted at every use.

use std::fmt;

/// The SQL dialect a name is written for: it decides quoting and case folding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// PostgreSQL: `"double quotes"`; unquoted names fold to lower case, so names are folded
    /// before quoting and mean exactly what Java ShedLock's unquoted SQL means.
    Postgres,
    /// MySQL and MariaDB: `` `backticks` ``; case as given (the server decides table-name case
    /// sensitivity, as for unquoted names).
    MySql,
    /// SQLite: `"double quotes"`; names compare without regard to ASCII case.
    Sqlite,
}

/// The longest identifier accepted: PostgreSQL's limit (63 bytes), below MySQL's 64.
pub const MAX_IDENTIFIER_LEN: usize = 63;

/// Why a configured table or column name was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentifierError {
    /// What was being named (`"table name"`, `"column lock_until"`).
    pub what: String,
    /// The text as given.
    pub given: String,
    /// The rule it broke.
    pub rule: &'static str,
}

impl fmt::Display for IdentifierError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {:?} is not accepted: {}",
            self.what, self.given, self.rule
        )
    }
}

impl std::error::Error for IdentifierError {}

/// A plain SQL identifier: an ASCII letter or `_`, then letters, digits or `_`, at most
/// [`MAX_IDENTIFIER_LEN`] characters.
///
/// Nothing else is accepted (no quotes, spaces, dots or Unicode), so quoting it can never be
/// escaped and the same name means the same object in every dialect.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Identifier(String);

impl Identifier {
    /// Checks `text`; `what` names the setting in the error (`"column locked_by"`).
    pub fn new(what: &str, text: &str) -> Result<Self, IdentifierError> {
        let error = |rule| IdentifierError {
            what: what.to_owned(),
            given: text.to_owned(),
            rule,
        };
        let mut chars = text.chars();
        match chars.next() {
            None => return Err(error("it is empty")),
            Some(first) if !(first.is_ascii_alphabetic() || first == '_') => {
                return Err(error("it must start with an ASCII letter or '_'"));
            }
            Some(_) => {}
        }
        if !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(error(
                "only ASCII letters, digits and '_' are allowed (no quotes, spaces or dots)",
            ));
        }
        if text.len() > MAX_IDENTIFIER_LEN {
            return Err(error("it is longer than 63 characters"));
        }
        Ok(Self(text.to_owned()))
    }

    /// The name as configured.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name as the dialect's catalog stores it (lower case on PostgreSQL).
    pub fn catalog_name(&self, dialect: Dialect) -> String {
        match dialect {
            Dialect::Postgres => self.0.to_ascii_lowercase(),
            Dialect::MySql | Dialect::Sqlite => self.0.clone(),
        }
    }

    /// The name ready to splice into SQL text.
    pub fn quoted(&self, dialect: Dialect) -> String {
        // Validation guarantees no quote character can occur, so no escaping is needed.
        match dialect {
            Dialect::Postgres | Dialect::Sqlite => format!("\"{}\"", self.catalog_name(dialect)),
            Dialect::MySql => format!("`{}`", self.0),
        }
    }

    /// Whether a name read back from the catalog is this one, by the dialect's rules for
    /// column names.
    pub fn matches_column(&self, dialect: Dialect, catalog_name: &str) -> bool {
        match dialect {
            Dialect::Postgres => self.catalog_name(dialect) == catalog_name,
            Dialect::MySql | Dialect::Sqlite => self.0.eq_ignore_ascii_case(catalog_name),
        }
    }
}

impl fmt::Display for Identifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A table name, optionally qualified by a schema (PostgreSQL), database (MySQL) or attached
/// database (SQLite): `shedlock` or `locks.shedlock`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TableName {
    /// The schema or database, when given; otherwise the connection's default.
    pub schema: Option<Identifier>,
    /// The table itself.
    pub table: Identifier,
}

impl TableName {
    /// Parses `table` or `schema.table`; each part must be a plain [`Identifier`].
    pub fn parse(text: &str) -> Result<Self, IdentifierError> {
        match text.split_once('.') {
            Some((schema, table)) => {
                if table.contains('.') {
                    return Err(IdentifierError {
                        what: "table name".to_owned(),
                        given: text.to_owned(),
                        rule: "at most one '.', between schema and table",
                    });
                }
                Ok(Self {
                    schema: Some(Identifier::new("schema of table name", schema)?),
                    table: Identifier::new("table name", table)?,
                })
            }
            None => Ok(Self {
                schema: None,
                table: Identifier::new("table name", text)?,
            }),
        }
    }

    /// The name ready to splice into SQL text, each part quoted.
    pub fn quoted(&self, dialect: Dialect) -> String {
        match &self.schema {
            Some(schema) => format!("{}.{}", schema.quoted(dialect), self.table.quoted(dialect)),
            None => self.table.quoted(dialect),
        }
    }
}

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.schema {
            Some(schema) => write!(f, "{schema}.{}", self.table),
            None => write!(f, "{}", self.table),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_identifiers_and_quotes_them_per_dialect() {
        let id = Identifier::new("table name", "Shed_Lock2").unwrap();
        assert_eq!(id.quoted(Dialect::Postgres), "\"shed_lock2\"");
        assert_eq!(id.quoted(Dialect::MySql), "`Shed_Lock2`");
        assert_eq!(id.quoted(Dialect::Sqlite), "\"Shed_Lock2\"");
        assert!(id.matches_column(Dialect::MySql, "shed_lock2"));
        assert!(!id.matches_column(Dialect::Postgres, "Shed_Lock2"));
        assert!(id.matches_column(Dialect::Postgres, "shed_lock2"));
    }

    #[test]
    fn refuses_anything_that_could_escape_quoting() {
        for bad in [
            "",
            "1abc",
            "a b",
            "a\"b",
            "a`b",
            "a;drop",
            "a-b",
            "é",
            "a.b",
            &"x".repeat(64),
        ] {
            let error = Identifier::new("column name", bad).unwrap_err();
            assert_eq!(error.given, bad);
            assert!(error.to_string().contains("column name"), "{error}");
        }
        assert!(Identifier::new("t", &"x".repeat(63)).is_ok());
    }

    #[test]
    fn parses_schema_qualified_table_names() {
        let name = TableName::parse("locks.shedlock").unwrap();
        assert_eq!(name.quoted(Dialect::Postgres), "\"locks\".\"shedlock\"");
        assert_eq!(name.quoted(Dialect::MySql), "`locks`.`shedlock`");
        assert_eq!(name.to_string(), "locks.shedlock");
        assert_eq!(TableName::parse("shedlock").unwrap().schema, None);
        assert!(TableName::parse("a.b.c").is_err());
        assert!(TableName::parse(".b").is_err());
        assert!(TableName::parse("a.").is_err());
    }
}
