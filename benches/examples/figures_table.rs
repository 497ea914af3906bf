//! Regenerates the book's figures table (`docs/src/figures-table.md`) from the recorded runs in
//! `docs/figures/*.json`; with `--check`, fails instead if the committed table differs.
//!
//! `cargo run -p manifestdb-bench --example figures_table [-- --check]`

#[path = "../figures.rs"]
mod figures;

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let table = figures::table(&figures::runs_dir())?;
    let path = figures::table_path();
    if std::env::args().any(|a| a == "--check") {
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        if committed != table {
            return Err(format!(
                "{} is not generated from docs/figures/*.json; run `cargo run -p manifestdb-bench --example figures_table`",
                path.display()
            )
            .into());
        }
        println!("{} is current", path.display());
        return Ok(());
    }
    std::fs::write(&path, table)?;
    println!("wrote {}", path.display());
    Ok(())
}
