//! Slow bodies, idle sockets and big headers from one address, while another is served.

use crate::{Args, Report};

pub async fn run(_args: &Args, _client: &reqwest::Client, _report: &Report) -> anyhow::Result<()> {
    Ok(())
}
