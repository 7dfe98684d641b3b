//! `seckill`: see `seckill --help`.

use clap::Parser;

// A buy allocates and frees a few hundred small blocks across the runtime's threads: glibc's
// allocator spent a sixth of the server's CPU on them (consolidating and unlinking chunks);
// with mimalloc's thread-local free lists the allocator costs half as much, and the
// server's CPU per buy fell from 76 to 65 µs in the same profiled benchmark.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    base::telemetry::init();
    seckill::cli::run(seckill::cli::Cli::parse()).await
}
