//! /openapi.json against the running daemon: schemathesis (pinned in scripts/pyclients.sh's
//! venv) runs every check on every operation with positive and negative data and a fixed
//! seed (`clients/python/schemathesis_test.py`); zero failures.

#[test]
fn schemathesis_finds_the_daemon_and_its_document_agree() {
    yued_e2e::run_pyclient("schemathesis_test.py", "SCHEMATHESIS OK");
}
