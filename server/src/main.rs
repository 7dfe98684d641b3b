//! `seckill`: see `seckill --help`.

use clap::Parser;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    seckill::infra::telemetry::init();
    seckill::cli::run(seckill::cli::Cli::parse()).await
}
