//! A bare axum hello world: the baseline `bench/server.sh` measures the faultless
//! fault-server against (the design asks for at least 90% of its throughput).
//!
//! `cargo run --release -p fault-server --example hello -- 127.0.0.1:18081`

use axum::Router;

// The fault-server's allocator, so the comparison measures the server, not the allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use axum::routing::get;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:18081".to_string());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    let app = Router::new().route("/", get(|| async { "Hello, World!" }));
    axum::serve(listener, app).await
}
