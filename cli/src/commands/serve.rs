//! `serve`: the library's server (`manifestdb::server`) over the store this command opens.

use std::sync::Arc;

use anyhow::Context;
use manifestdb::server::{Listen, Server, ServerOptions, socket_path};
use serde_json::json;

use crate::args::ServeArgs;
use crate::exit::Exit;
use crate::location::LocationArgs;
use crate::output::Out;

/// `serve`: exit 0 after a signal ended it.
pub fn serve(location: &LocationArgs, out: &mut Out, args: &ServeArgs) -> anyhow::Result<Exit> {
    let path = location.store_path()?;
    // The server holds the only handle (so `verify --integrity` can have it alone) and gives it
    // back when it stops.
    let store = Arc::new(location.open_writer_with(|options| {
        if args.exclusive {
            options.cross_process_readers = false;
            options.durable_begins = args.durable_begins;
        }
    })?);
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
