// mimalloc rather than the system allocator: a request's allocations are often freed on
// another worker thread than made them, which glibc's malloc handles slowly (a sixth of
// the harness's CPU at 12,000 req/s; docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    harness::cli::main()
}
