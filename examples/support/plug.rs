//! A TCP proxy that can be unplugged: its connections are dropped and new ones closed at
//! once, which is what a client sees when the server behind it is stopped. Shared by the
//! fault tests (`tests/api/faults.rs`) and the long fault suite (`examples/faults.rs`).

use std::net::SocketAddr;

use tokio::{
    net::{TcpListener, TcpStream},
    sync::watch,
};

pub struct Plug {
    pub addr: SocketAddr,
    plugged: watch::Sender<bool>,
}

impl Plug {
    /// A plugged-in proxy to `upstream` (`host:port`) on a free local port.
    pub async fn to(upstream: &str) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (plugged, _) = watch::channel(true);
        let state = plugged.clone();
        let upstream = upstream.to_string();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if !*state.borrow() {
                    continue; // dropped: the client sees its connection closed at once
                }
                let mut unplugged = state.subscribe();
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = unplugged.wait_for(|plugged| !plugged) => {}
                    }
                });
            }
        });
        Ok(Self { addr, plugged })
    }

    pub fn unplug(&self) {
        self.plugged.send_replace(false);
    }

    pub fn plug_in(&self) {
        self.plugged.send_replace(true);
    }
}
