//! The OpenAI-compatible routes through the official `openai` Python SDK: runs
//! `clients/python/openai_sdk_test.py` against the `yued` binary cargo built.

#[test]
fn the_openai_sdk_lists_models_speaks_streams_and_is_rate_limited() {
    yued_e2e::run_pyclient("openai_sdk_test.py", "OPENAI SDK OK");
}
