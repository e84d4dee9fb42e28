//! The `yue` binary on its own (the daemon round trips live in the workspace e2e tests).
use std::process::Command;

#[test]
fn help_lists_every_command_and_a_dead_server_is_a_clean_error() {
    let o = Command::new(env!("CARGO_BIN_EXE_yue")).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&o.stdout);
    for c in ["synth", "status", "result", "cancel", "props"] {
        assert!(help.contains(c), "{help}");
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let o = Command::new(env!("CARGO_BIN_EXE_yue"))
        .args(["--server", &format!("http://127.0.0.1:{port}"), "props"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.starts_with("error:") && e.to_lowercase().contains("connection refused"), "says why: {e}");
    // A load test no request of which was answered is a failure, not a report of zeros.
    let o = Command::new(env!("CARGO_BIN_EXE_yue"))
        .args(["--server", &format!("http://127.0.0.1:{port}"), "load", "--rps", "20", "--seconds", "0.2"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stderr));
    let o = Command::new(env!("CARGO_BIN_EXE_yue")).args(["fanout", "abc"]).output().unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("16 lowercase hex"));
    let o = Command::new(env!("CARGO_BIN_EXE_yue")).args(["cancel", "not-an-id"]).output().unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("16 lowercase hex"));
}
