//! Attributes `#[scheduler_lock]` refuses, each a compile error that says what is wrong and
//! points at the attribute (or the part of it at fault).

#[test]
fn bad_attributes_are_compile_errors() {
    trybuild::TestCases::new().compile_fail("tests/ui/*.rs");
}
