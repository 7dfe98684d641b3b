//! `seckill`: see `seckill --help`.

use clap::Parser;

// A buy allocates and frees a few hundred small blocks across the runtime's threads: glibc's
// allocator spent a sixth of the server's CPU on them (consolidating and unlinking chunks);
// mimalloc's thread-local free lists take most of that away.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    seckill::infra::telemetry::init();
    seckill::cli::run(seckill::cli::Cli::parse()).await
}
