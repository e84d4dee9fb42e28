//! The MCP server at /mcp through the official `mcp` Python SDK over Streamable HTTP: runs
//! `clients/python/mcp_sdk_test.py` (initialize, the four tools and the guide, compose →
//! status → an expiring download link for both families, the allowlist, the admission cap,
//! the transport's session rules) against the `yued` binary cargo built.

#[test]
fn the_mcp_sdk_composes_polls_downloads_and_is_refused_what_it_may_not_touch() {
    yued_e2e::run_pyclient("mcp_sdk_test.py", "MCP SDK OK");
}
