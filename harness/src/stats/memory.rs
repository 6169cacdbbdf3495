//! The process's own peak memory, for the terminal and the docs' figures.

/// The peak resident memory of this process so far, in KiB: `VmHWM` of
/// `/proc/self/status`, where the kernel keeps it. `None` where there is no such file.
pub fn peak_resident_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg(target_os = "linux")]
    fn the_peak_is_read_and_covers_what_was_touched() {
        let before = super::peak_resident_kib().expect("linux has VmHWM");
        let touched = vec![1u8; 64 << 20];
        let after = super::peak_resident_kib().expect("linux has VmHWM");
        assert!(after >= before.max(64 << 10), "{before} then {after} KiB");
        drop(touched);
    }
}
