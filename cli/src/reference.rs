//! The book's CLI reference (`docs/src/cli-reference.md`), generated from the clap definitions.
//!
//! Each verb's section is its `--help` text as the tool prints it, without the global options
//! (shown once, in the first section), so the reference is never written twice. The test below fails when the committed page differs from what the
//! definitions give; `MANIFESTDB_WRITE_DOCS=1 cargo test -p manifestdb-cli --bin manifestdb
//! reference` writes it anew.

use std::fmt::Write as _;

use clap::CommandFactory;

use crate::args::Cli;

/// The width the help text is wrapped at: the tool's own maximum, whatever the terminal.
const WIDTH: usize = 100;

/// The page: an introduction, then every command's long help, depth first, in definition order.
pub(crate) fn markdown() -> String {
    let mut root = Cli::command().term_width(WIDTH).max_term_width(WIDTH);
    root.build();
    let mut page = String::from(
        "# Command-line reference\n\n\
         <!-- Generated from the clap definitions by cli/src/reference.rs; do not edit.\n     \
         Regenerate: MANIFESTDB_WRITE_DOCS=1 cargo test -p manifestdb-cli --bin manifestdb reference -->\n\n\
         Every verb's `--help`, as `manifestdb` prints it; the global options (store location, \
         `--json`, the log) are shown once, in the first section, and every verb takes them. The \
         [command-line chapter](cli.md) explains the verbs together; `manifestdb man` writes the \
         same text as a man page.\n",
    );
    section(&mut page, &mut root, &[]);
    page
}

fn section(page: &mut String, command: &mut clap::Command, path: &[&str]) {
    let name = if path.is_empty() { "manifestdb".to_owned() } else { format!("manifestdb {}", path.join(" ")) };
    let level = "#".repeat((path.len() + 2).min(6));
    // The page must not depend on who generates it: the values of MANIFESTDB_* variables set
    // in the environment stay out of it. A verb shows its own flags only: the global ones are
    // in the first section.
    let top = path.is_empty();
    let mut shown = command.clone().mut_args(|arg| {
        let arg = arg.hide_env_values(true);
        if !top && arg.is_global_set() { arg.hide(true) } else { arg }
    });
    let help = shown.render_long_help().to_string();
    let help: Vec<&str> = help.lines().map(str::trim_end).collect();
    // `writeln!` into a String cannot fail.
    let _ = write!(page, "\n{level} `{name}`\n\n```text\n{}\n```\n", help.join("\n").trim_end());
    let names: Vec<String> = command
        .get_subcommands()
        .filter(|sub| !sub.is_hide_set() && sub.get_name() != "help")
        .map(|sub| sub.get_name().to_owned())
        .collect();
    for sub_name in names {
        if let Some(sub) = command.find_subcommand_mut(&sub_name) {
            let mut sub_path = path.to_vec();
            sub_path.push(&sub_name);
            section(page, sub, &sub_path);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    #[test]
    fn the_books_cli_reference_is_generated_from_the_current_definitions() {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/src/cli-reference.md");
        let generated = super::markdown();
        if std::env::var_os("MANIFESTDB_WRITE_DOCS").is_some() {
            std::fs::write(&path, &generated).expect("write docs/src/cli-reference.md");
            return;
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == generated,
            "docs/src/cli-reference.md is not what the clap definitions give; regenerate it with \
             MANIFESTDB_WRITE_DOCS=1 cargo test -p manifestdb-cli --bin manifestdb reference"
        );
    }
}
