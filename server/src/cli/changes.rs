//! `seckill changes list|approve|reject|cancel|promote|abort`: the switch changes that
//! wait, over PostgreSQL and etcd only.

use clap::Subcommand;
use contract::{Actor, ChangeState, Source};

use ops::{
    changes::{
        service::{self, Decision},
        stage,
    },
    control::board::Board,
};

#[derive(Subcommand)]
pub(super) enum ChangesCommand {
    /// The latest changes, newest first, as JSON.
    List {
        /// `scheduled`, `pending_approval`, `staged`, `applied`, `reverted`, `cancelled`,
        /// `rejected` or `aborted`.
        #[arg(long, value_parser = parse_state)]
        state: Option<ChangeState>,
    },
    /// Approve another person's change to a key that needs four eyes: applies it (at its
    /// own time if that is still ahead); prints the change.
    Approve {
        id: i64,
        #[arg(long)]
        reason: String,
    },
    /// Refuse a change that waits for approval.
    Reject {
        id: i64,
        #[arg(long)]
        reason: String,
    },
    /// Take back a change that has not applied yet.
    Cancel {
        id: i64,
        #[arg(long)]
        reason: String,
    },
    /// Put a staged change's value in force on every instance; prints the change.
    Promote {
        id: i64,
        #[arg(long)]
        reason: String,
    },
    /// Take a staged change back: its instances apply the key's own value again.
    Abort {
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
        ChangesCommand::Approve { id, reason } => {
            let now = chrono::Utc::now();
            let change = service::approve(board, actor, Source::Cli, id, &reason, now).await?;
            println!("{}", serde_json::to_string_pretty(&change)?);
        }
        ChangesCommand::Reject { id, reason } => {
            service::decide(board, actor, Source::Cli, id, Decision::Reject, &reason).await?;
            println!("change #{id} rejected");
        }
        ChangesCommand::Cancel { id, reason } => {
            service::decide(board, actor, Source::Cli, id, Decision::Cancel, &reason).await?;
            println!("change #{id} cancelled");
        }
        ChangesCommand::Promote { id, reason } => {
            let now = chrono::Utc::now();
            let change = stage::promote(board, actor, Source::Cli, id, &reason, now).await?;
            println!("{}", serde_json::to_string_pretty(&change)?);
        }
        ChangesCommand::Abort { id, reason } => {
            let change = stage::abort(board, actor, Source::Cli, id, &reason).await?;
            println!("{}", serde_json::to_string_pretty(&change)?);
        }
    }
    Ok(())
}
