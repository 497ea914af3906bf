//! Holds every packet of netfilter queue 0 for a fixed time, then lets it through: the link delay
//! of `scripts/pg-netns` on a kernel built without `netem` (`CONFIG_NET_SCH_NETEM`), as this
//! machine's is. It is not a proxy: the packets are the kernel's, unchanged, between the two
//! TCP stacks; only the moment each one is released is decided here.
//!
//!   manifestdb-netdelay MICROSECONDS
//!
//! The script queues a namespace's packets to it (`iptables -j NFQUEUE` on the veth's INPUT and
//! OUTPUT), so each direction is delayed once. Packets leave in the order they came, each at its
//! arrival plus the delay (a fixed delay keeps that order). It runs until killed; the kernel then
//! drops what it still held, which TCP sends again.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

const QUEUE: u16 = 0;

fn main() {
    let delay = match std::env::args().nth(1).and_then(|a| a.parse::<u64>().ok()) {
        Some(us) => Duration::from_micros(us),
        None => {
            eprintln!("usage: manifestdb-netdelay MICROSECONDS (the delay of each packet)");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(delay) {
        eprintln!("manifestdb-netdelay: {e}");
        std::process::exit(1);
    }
}

fn run(delay: Duration) -> std::io::Result<()> {
    // Wake-ups on time: the default timer slack (50 us) would add to every packet's delay.
    // SAFETY: prctl with PR_SET_TIMERSLACK takes an integer and touches no memory of ours.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
    let fd = next_fd()?;
    let mut queue = nfq::Queue::open()?;
    check_netlink(fd)?;
    queue.bind(QUEUE)?;
    // Metadata only: the verdict needs the packet's id, not its bytes.
    queue.set_copy_range(QUEUE, 0)?;
    queue.set_queue_max_len(QUEUE, 1 << 16)?;
    queue.set_recv_gso(QUEUE, true)?;
    queue.set_nonblocking(true);
    let mut held: VecDeque<(Instant, nfq::Message)> = VecDeque::new();
    loop {
        let now = Instant::now();
        while held.front().is_some_and(|(due, _)| *due <= now) {
            let (_, mut msg) = held.pop_front().expect("checked above");
            msg.set_verdict(nfq::Verdict::Accept);
            queue.verdict(msg)?;
        }
        let wait = held.front().map(|(due, _)| due.saturating_duration_since(now));
        wait_readable(fd, wait)?;
        loop {
            match queue.recv() {
                Ok(msg) => held.push_back((Instant::now() + delay, msg)),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
    }
}

/// The descriptor the next socket will get: POSIX hands out the lowest free one, and this
/// process opens nothing else in between. `nfq` does not expose its socket, and waiting on it
/// with a deadline (rather than spinning on non-blocking reads) needs it.
fn next_fd() -> std::io::Result<libc::c_int> {
    // SAFETY: dup and close of our own standard input's duplicate.
    let fd = unsafe { libc::dup(0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is the duplicate just made.
    unsafe { libc::close(fd) };
    Ok(fd)
}

/// Fails unless `fd` is a netlink socket (the queue's, opened just now).
fn check_netlink(fd: libc::c_int) -> std::io::Result<()> {
    let mut domain: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `domain`.
    let rc = unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_DOMAIN, (&raw mut domain).cast(), &mut len) };
    if rc != 0 || domain != libc::AF_NETLINK {
        return Err(std::io::Error::other(format!("descriptor {fd} is not the queue's netlink socket")));
    }
    Ok(())
}

/// Waits until `fd` is readable or `wait` has passed (forever if `None`).
fn wait_readable(fd: libc::c_int, wait: Option<Duration>) -> std::io::Result<()> {
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    let ts = wait.map(|w| libc::timespec { tv_sec: w.as_secs() as libc::time_t, tv_nsec: w.subsec_nanos() as libc::c_long });
    let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: one pollfd, a timespec that outlives the call or null, no signal mask.
    let rc = unsafe { libc::ppoll(&mut pfd, 1, ts_ptr, std::ptr::null()) };
    if rc < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(())
}
