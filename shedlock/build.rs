//! Names four facts about which provider features are on, so the facade's code and tests test
//! one word instead of repeating the feature list: `some_backend` (at least one provider is
//! built in), `server_backend` (at least one that talks to a server), `sql_backend` (at least
//! one SQL provider) and `every_backend` (all of them). The features themselves are in
//! `Cargo.toml`; this is the one list of them in code.

/// Every provider feature: the in-process one, the SQL ones, then the rest, which all talk to a
/// server.
const BACKENDS: [&str; 8] = [
    "memory",
    "sqlite",
    "postgres",
    "mysql",
    "redis",
    "etcd",
    "mongo",
    "zookeeper",
];

fn main() {
    let on = |feature: &&str| {
        let variable = format!("CARGO_FEATURE_{}", feature.to_uppercase());
        std::env::var_os(variable).is_some()
    };
    for (name, holds) in [
        ("some_backend", BACKENDS.iter().any(on)),
        ("server_backend", BACKENDS[1..].iter().any(on)),
        ("sql_backend", BACKENDS[1..4].iter().any(on)),
        ("every_backend", BACKENDS.iter().all(on)),
    ] {
        println!("cargo::rustc-check-cfg=cfg({name})");
        if holds {
            println!("cargo::rustc-cfg={name}");
        }
    }
}
