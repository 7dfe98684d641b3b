//! `seckill changes list|cancel`: the switch changes that wait, over PostgreSQL only.

use clap::Subcommand;
use contract::{Actor, ChangeState, Source};

use crate::{changes::service, control::board::Board};

#[derive(Subcommand)]
pub(super) enum ChangesCommand {
    /// The latest changes, newest first, as JSON.
    List {
        /// `scheduled`, `pending_approval`, `applied`, `reverted`, `cancelled` or `rejected`.
        #[arg(long, value_parser = parse_state)]
        state: Option<ChangeState>,
    },
    /// Take back a change that has not applied yet.
    Cancel {
        id: i64,
        #[arg(long)]
        reason: String,
    },
}

fn parse_state(text: &str) -> Result<ChangeState, String> {
    ChangeState::parse(text).ok_or_else(|| format!("no change state `{text}`"))
}

pub(super) async fn run(
    board: &Board<'_>,
    actor: &Actor,
    command: ChangesCommand,
) -> anyhow::Result<()> {
    match command {
        ChangesCommand::List { state } => {
            let changes = service::list(board, actor, state).await?;
            println!("{}", serde_json::to_string_pretty(&changes)?);
        }
        ChangesCommand::Cancel { id, reason } => {
            service::cancel(board, actor, Source::Cli, id, &reason).await?;
            println!("change #{id} cancelled");
        }
    }
    Ok(())
}
