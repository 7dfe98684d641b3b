//! `seckill`: see `seckill --help`.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    seckill::infra::telemetry::init();
    seckill::cli::run(seckill::cli::Cli::parse()).await
}
