//! Writes a large session into a store, to measure `rath show` on it:
//!
//! ```sh
//! cargo run --release -p rath-cli --example big_session -- /tmp/big 200
//! /usr/bin/time -v target/release/rath --store /tmp/big show 0001 --limit 20 > /dev/null
//! ```
//!
//! Arguments: the OpenRath home to write into (created; the session goes to its `sessions/`)
//! and the size in MB (default 200).

#[path = "../tests/common/big.rs"]
mod big;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let home = std::path::PathBuf::from(
        args.next()
            .ok_or_else(|| anyhow::anyhow!("usage: big_session HOME [MB]"))?,
    );
    let mb: u64 = args.next().map_or(Ok(200), |a| a.parse())?;
    let dir = home.join("sessions");
    std::fs::create_dir_all(&dir)?;
    let (path, id) = big::write_big_session(&dir, mb * 1024 * 1024);
    let len = std::fs::metadata(&path)?.len();
    println!("wrote session {id}: {} ({len} bytes)", path.display());
    Ok(())
}
