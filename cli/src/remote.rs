//! Talking to a running server of the store (`manifestdb serve`) instead of opening its file.
//!
//! A writing verb first looks for a server: the one `--server URL` names, or else one listening
//! on the socket in the store's directory ([`manifestdb::server::socket_path`]). When it finds
//! one, it sends its request there, and prints the server's answer, which is the document the
//! verb prints when it opens the file itself (both are built by `manifestdb::documents`); an
//! error answer becomes the same exit code and message. Without a server the verb opens the
//! file. Every verb does so, the reading ones too ([`read`]): with `--server` naming a server
//! on another host, the store file need not be reachable from this one.

use anyhow::Context;
use manifestdb::Snapshot;
use manifestdb::documents::reads::DocumentError;
use manifestdb::server::{Client, parse_target, read_token_file};
use serde_json::Value;

use crate::exit::{CliError, Exit, usage};
use crate::location::LocationArgs;

/// A connection to the store's server.
pub struct Remote {
    client: Client,
}

impl Remote {
    /// The server to use: the one `--server` names (an error if that address is not valid),
    /// else the one listening on the socket in the store's directory, else none (open the
    /// file). A socket left by a server that was killed accepts nobody and counts as none.
    pub fn find(location: &LocationArgs) -> anyhow::Result<Option<Remote>> {
        let target = match &location.server {
            Some(text) => parse_target(text).map_err(|e| usage(format!("--server: {e}")))?,
            None => match location.live_socket()? {
                Some(target) => target,
                None => return Ok(None),
            },
        };
        let mut client = Client::new(target).context("starting the server client")?;
        if let Some(path) = &location.server_token_file {
            // The server's own reader: the same trimming, limits and warning for a file others
            // may read.
            let token = read_token_file(path).context("reading the server token file")?;
            let token = String::from_utf8(token).map_err(|_| usage(format!("the server token file {} is not UTF-8", path.display())))?;
            client = client.with_token(token);
        }
        Ok(Some(Remote { client }))
    }

    /// Where the server listens (`unix:PATH` or `http://IP:PORT`).
    pub fn target(&self) -> String {
        self.client.target().to_string()
    }

    /// `POST route` with `body`: the answer's document, or its error as the tool's own error
    /// (the exit code the JSON error's `kind` names, and its message).
    pub fn post(&mut self, route: &str, body: &Value) -> anyhow::Result<Value> {
        let answer =
            self.client.request("POST", route, Some(body)).with_context(|| format!("calling the server at {}", self.client.target()))?;
        answer_document(answer)
    }

    /// `GET route?query`: the answer's document, or its error as [`Remote::post`] gives it.
    pub fn get(&mut self, route: &str, query: &Value) -> anyhow::Result<Value> {
        let answer = self.client.get(route, query).with_context(|| format!("calling the server at {}", self.client.target()))?;
        answer_document(answer)
    }
}

/// A reading verb's document: `GET route?query` from the store's server when one runs (or
/// `--server` names one), else `local` over a snapshot of the store file opened read-only.
pub fn read(
    location: &LocationArgs,
    route: &str,
    query: &Value,
    local: impl FnOnce(&Snapshot) -> Result<Value, DocumentError>,
) -> anyhow::Result<Value> {
    match Remote::find(location)? {
        Some(mut server) => server.get(route, query),
        None => location.read_document(local),
    }
}

/// A writing verb's document: `POST route` with `body` to the store's server when one runs,
/// else `local` (which opens the file for writing).
pub fn write(location: &LocationArgs, route: &str, body: &Value, local: impl FnOnce() -> anyhow::Result<Value>) -> anyhow::Result<Value> {
    match Remote::find(location)? {
        Some(mut server) => server.post(route, body),
        None => local(),
    }
}

/// The document of a 2xx answer; an error answer as the tool's own error.
fn answer_document(answer: manifestdb::server::Answer) -> anyhow::Result<Value> {
    if (200..300).contains(&answer.status) {
        return Ok(answer.body);
    }
    let error = &answer.body["error"];
    let message = error["message"].as_str().map_or_else(|| format!("the server answered {}", answer.status), str::to_owned);
    Err(CliError { exit: exit_of_kind(error["kind"].as_str().unwrap_or_default()), message }.into())
}

/// The exit code of a server error's `kind` (the names of [`Exit::name`]); an unknown kind is a
/// fault.
pub fn exit_of_kind(kind: &str) -> Exit {
    [Exit::Usage, Exit::Refused, Exit::NotFound, Exit::Conflict, Exit::Busy, Exit::Corrupt, Exit::OutcomeUnknown, Exit::Unauthorized]
        .into_iter()
        .find(|exit| exit.name() == kind)
        .unwrap_or(Exit::Fault)
}
