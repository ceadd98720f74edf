//! Says how to get `protoc` when it is missing, since `etcd-client` cannot be built without it.
//!
//! Cargo usually runs `etcd-client`'s build script first, and that one already fails with
//! "Could not find `protoc`"; this script repeats the advice in this crate's terms wherever
//! Cargo gets to it first (for example when `etcd-client` was built earlier with a `PROTOC`
//! that has since gone away, which makes no difference to a finished build).

use std::env;
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-env-changed=PROTOC");
    println!("cargo:rerun-if-env-changed=PATH");
    let found = match env::var_os("PROTOC") {
        Some(path) => Path::new(&path).is_file(),
        None => env::var_os("PATH")
            .is_some_and(|paths| env::split_paths(&paths).any(|dir| dir.join("protoc").is_file())),
    };
    if !found {
        println!(
            "cargo:warning=shedlock-etcd: `protoc` was not found (PATH, or the PROTOC variable). \
             etcd-client needs it to compile etcd's protobuf definitions: on Debian/Ubuntu run \
             `apt-get install protobuf-compiler`, elsewhere install protoc and set PROTOC=/path/to/protoc."
        );
    }
}
