//! A bare axum hello world: the baseline `bench/server.sh` measures the faultless
//! fault-server against (the design asks for at least 90% of its throughput).
//!
//! `cargo run --release -p fault-server --example hello -- 127.0.0.1:18081 [127.0.0.1:18082]`
//!
//! The first address is served by `axum::serve` (HTTP/1.1). The second, if given, by the
//! same router on hyper's HTTP/2 connection (cleartext, prior knowledge), as a bare axum
//! HTTP/2 server is written: one task per connection, hyper's default settings (200
//! concurrent streams, as the fault-server's default).

use axum::Router;

// The fault-server's allocator, so the comparison measures the server, not the allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use axum::routing::get;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:18081".to_string());
    let app = Router::new().route("/", get(|| async { "Hello, World!" }));
    if let Some(h2_addr) = args.next() {
        let listener = tokio::net::TcpListener::bind(&h2_addr).await?;
        let app = app.clone();
        tokio::spawn(async move {
            let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
            builder.timer(TokioTimer::new());
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let service = TowerToHyperService::new(app.clone());
                let served = builder.serve_connection(TokioIo::new(stream), service);
                tokio::spawn(served);
            }
        });
    }
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    axum::serve(listener, app).await
}
