//! Progress on long work: on a terminal (stderr on a pseudo-terminal), `attempt validate
//! --checksums`, `gc apply` and `verify --checksums` draw the library's counts of files and
//! bytes; when stderr is not a terminal, or with `--json`, nothing is drawn; never on stdout.

use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::Stdio;

use crate::support::{Env, Run, command};

const EU: &str = "date=2026-11-29/region=eu";

/// A pseudo-terminal of 120 columns: (master, slave).
fn pty() -> (std::fs::File, OwnedFd) {
    // SAFETY: plain libc calls on descriptors this function opens and owns; `name` is a
    // NUL-terminated buffer that ptsname_r fills.
    unsafe {
        let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(master >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
        let master = std::fs::File::from_raw_fd(master);
        use std::os::fd::AsRawFd;
        assert_eq!(libc::grantpt(master.as_raw_fd()), 0, "grantpt");
        assert_eq!(libc::unlockpt(master.as_raw_fd()), 0, "unlockpt");
        let mut name = [0 as libc::c_char; 256];
        assert_eq!(libc::ptsname_r(master.as_raw_fd(), name.as_mut_ptr(), name.len()), 0, "ptsname_r");
        let slave = libc::open(name.as_ptr(), libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(slave >= 0, "open the pty's slave: {}", std::io::Error::last_os_error());
        let size = libc::winsize { ws_row: 40, ws_col: 120, ws_xpixel: 0, ws_ypixel: 0 };
        assert_eq!(libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &size), 0, "TIOCSWINSZ");
        (master, OwnedFd::from_raw_fd(slave))
    }
}

/// Runs the binary on `env`'s store with stderr on a terminal (stdout piped); returns the exit
/// code, stdout, and everything the terminal received.
fn on_a_terminal(env: &Env, args: &[&str]) -> Run {
    let (mut master, slave) = pty();
    let mut child = {
        let mut cmd = command();
        cmd.args(env.store_args()).args(args).env("TERM", "xterm").stdout(Stdio::piped()).stderr(Stdio::from(slave));
        cmd.spawn().expect("run the manifestdb binary")
        // The command, and with it the parent's copy of the slave, is dropped here: the
        // terminal reads end of file (EIO) once the child is gone.
    };
    let terminal = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let mut buf = [0u8; 4096];
        // A pty's master reads EIO once no slave is open: the end.
        while let Ok(n) = master.read(&mut buf) {
            if n == 0 {
                break;
            }
            bytes.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    });
    let mut stdout = String::new();
    child.stdout.take().expect("stdout").read_to_string(&mut stdout).expect("read stdout");
    let status = child.wait().expect("wait");
    Run { code: status.code().expect("exited"), stdout, stderr: terminal.join().expect("terminal reader") }
}

/// A store with a published run of three files and an invalid attempt of four files (a
/// cleanup candidate); returns the invalid attempt's number.
fn store_with_work() -> (Env, String) {
    let env = Env::new();
    env.declare("r1", "s1", &[(EU, 2, 700)]);
    let (attempt, dir) = env.begin("r1", EU);
    for i in 0..4 {
        std::fs::write(dir.join(format!("part-{i}.csv")), "item,units\n1,1\n".repeat(i + 1)).expect("write");
    }
    let n = attempt.to_string();
    let finish = ["attempt", "finish", "-d", "daily", "-r", "r1", "-p", EU, "-a", &n, "--snapshot", "s1"];
    env.run(&[&finish[..], &["--rows", "4", "--total", "4", "--digest", "d", "--scan"]].concat()).code(0);
    (env, n)
}

#[test]
fn a_terminal_sees_counts_of_files_and_bytes() {
    let (env, n) = store_with_work();
    let validate = on_a_terminal(&env, &["attempt", "validate", "-d", "daily", "-r", "r1", "-p", EU, "-a", &n, "--checksums"]);
    validate.code(3);
    assert!(validate.stderr.contains("checksumming ") && validate.stderr.contains("/4 files"), "{:?}", validate.stderr);
    assert!(validate.stderr.contains(" B/"), "bytes are drawn: {:?}", validate.stderr);
    assert!(!validate.stdout.contains("checksumming") && validate.stdout.contains("is invalid"), "{}", validate.stdout);

    let plan = env.json(&["gc", "plan", "--age-threshold", "0s", "--force-short-threshold"]).code(0).json();
    let id = plan["plan"].as_u64().expect("plan id").to_string();
    let apply = on_a_terminal(&env, &["gc", "apply", "--plan", &id, "--execute"]);
    apply.code(0);
    assert!(apply.stderr.contains("deleting ") && apply.stderr.contains("/4 files"), "{:?}", apply.stderr);
    assert!(!apply.stdout.contains("deleting ") && apply.stdout.contains("deleted 4 file"), "{}", apply.stdout);

    env.publish_run("r2", "s2", &[(EU, 2, 700)]);
    let verify = on_a_terminal(&env, &["verify", "--checksums"]);
    verify.code(0);
    assert!(verify.stderr.contains("checksumming ") && verify.stderr.contains("/1 file"), "{:?}", verify.stderr);
    assert!(!verify.stdout.contains("checksumming"), "{}", verify.stdout);

    // With --json nothing is drawn even on a terminal.
    let json = on_a_terminal(&env, &["--json", "verify", "--checksums"]);
    assert!(!json.code(0).stderr.contains("checksumming"), "{:?}", json.stderr);
}

#[test]
fn nothing_is_drawn_when_stderr_is_not_a_terminal() {
    let (env, n) = store_with_work();
    let plain = |run: &Run| {
        for noise in ["checksumming", "deleting ", "checking ", "\r", "\u{1b}["] {
            assert!(!run.stderr.contains(noise), "{noise:?} on stderr: {:?}", run.stderr);
            assert!(!run.stdout.contains(noise), "{noise:?} on stdout: {:?}", run.stdout);
        }
    };
    let validate = crate::support::finish(
        command()
            .args(env.store_args())
            .args(["attempt", "validate", "-d", "daily", "-r", "r1", "-p", EU, "-a", &n, "--checksums"])
            .env("TERM", "xterm"),
    );
    plain(validate.code(3));
    let plan = env.json(&["gc", "plan", "--age-threshold", "0s", "--force-short-threshold"]).code(0).json();
    let id = plan["plan"].as_u64().expect("plan id").to_string();
    let apply =
        crate::support::finish(command().args(env.store_args()).args(["gc", "apply", "--plan", &id, "--execute"]).env("TERM", "xterm"));
    plain(apply.code(0));
    let verify = crate::support::finish(command().args(env.store_args()).args(["verify", "--checksums"]).env("TERM", "xterm"));
    plain(verify.code(0));
}
