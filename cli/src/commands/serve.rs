//! `serve`: the library's server (`manifestdb::server`) over the store this command opens.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use manifestdb::server::{Listen, Server, ServerOptions, socket_path};
use serde_json::json;

use crate::exit::Exit;
use crate::location::LocationArgs;
use crate::output::Out;

/// The `--help` text after the flags: what is printed, and where to look next.
pub const SERVE_HELP: &str = "\
Once listening, prints one line (with --json: {\"listening\": ADDRESS, \"store\": PATH}) and
serves until SIGINT or SIGTERM, then finishes the requests in flight, removes the socket and
closes the store. ADDRESS is unix:PATH or http://HOST:PORT. Every answer is JSON; an error is
{\"error\": {\"exit_code\", \"kind\", \"message\"}} with the codes listed below.";

/// Flags of `serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Listen on this TCP address (e.g. 127.0.0.1:7070) instead of the Unix socket.
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "socket")]
    pub listen: Option<SocketAddr>,

    /// The Unix socket's path (default: manifestdb.sock in the store's directory, where the
    /// tool looks for a running server).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,

    /// Create the socket with mode 0660, so the store owner's group may connect too.
    #[arg(long)]
    pub socket_group: bool,

    /// A file holding the bearer token every request must carry (`Authorization: Bearer
    /// TOKEN`). Required with a non-loopback --listen address. A file other users may read gets
    /// a warning (chmod 600 it).
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<PathBuf>,

    /// A name clients may give as the `Host` of a TCP request (repeat for several; e.g. the
    /// host's DNS name). Without it a TCP request must name a loopback address, localhost or the
    /// --listen address; any other Host gets 421, so a web page cannot drive the server
    /// through DNS rebinding.
    #[arg(long = "host-name", value_name = "NAME")]
    pub host_names: Vec<String>,

    /// The largest request body accepted, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = manifestdb::server::BODY_LIMIT_BYTES_DEFAULT)]
    pub body_limit: usize,

    /// How long a request may take to arrive and be answered (408 after that).
    #[arg(long, value_name = "DURATION", value_parser = crate::args::parse_duration, default_value = "60s")]
    pub request_timeout: std::time::Duration,

    /// How long a connection may take to send its next request head before it is closed.
    #[arg(long, value_name = "DURATION", value_parser = crate::args::parse_duration, default_value = "30s")]
    pub idle_timeout: std::time::Duration,
}

/// `serve`: exit 0 after a signal ended it.
pub fn serve(location: &LocationArgs, out: &mut Out, args: &ServeArgs) -> anyhow::Result<Exit> {
    let path = location.store_path()?;
    // The server holds the only handle (so `verify --integrity` can have it alone) and gives it
    // back when it stops.
    let store = Arc::new(location.open_writer()?);
    let mut options = match args.listen {
        Some(addr) => ServerOptions::tcp(addr),
        None => ServerOptions::unix(args.socket.clone().unwrap_or_else(|| socket_path(&path))),
    };
    options.socket_group_access = args.socket_group;
    options.token_file = args.token_file.clone();
    options.host_names = args.host_names.clone();
    options.body_limit_bytes = args.body_limit;
    options.request_timeout = args.request_timeout;
    options.idle_timeout = args.idle_timeout;
    let server = Server::start(store, &options).context("starting the server")?;
    let address = server.address().to_string();
    let doc = json!({ "listening": address, "store": path });
    // One line either way, so a supervisor can read it before the first request.
    if out.is_json() {
        out.raw(&format!("{doc}\n"))?;
    } else {
        out.raw(&format!("listening on {address} (store {})\n", path.display()))?;
    }
    if let Listen::Tcp(addr) = server.address() {
        tracing::info!(%addr, "serving over TCP");
    }
    let store = server.run_until_signalled().context("serving")?;
    let store = Arc::try_unwrap(store).map_err(|_| anyhow::anyhow!("the server still holds the store after shutting down"))?;
    crate::location::close_writer(store)?;
    Ok(Exit::Success)
}
