//! Scrapes of `/metrics` and `/readyz` in a flood, and many subscribers of one board.

use crate::{Args, Report};

pub async fn run(_args: &Args, _client: &reqwest::Client, _report: &Report) -> anyhow::Result<()> {
    Ok(())
}
