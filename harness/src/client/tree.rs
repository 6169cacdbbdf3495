//! The program's whole process tree, owned: everything it started, however it left its
//! process group, is found, stopped and reaped at the run's end.
//!
//! Why more than a process group: a child that calls `setsid` (a daemon, `setsid curl …
//! &`) leaves the group, so a group kill missed it; it kept sending after the run, and
//! one that kept the program's stdout open kept the run waiting for it (45 s for a
//! `setsid sleep 45 &`, forever for a daemon).
//!
//! On Linux the harness makes itself a child subreaper, so what the program orphans is
//! re-parented to the harness instead of to init, and stays findable. The tree is then
//! every process whose parent chain leads to a child of the harness started after the
//! spawn began (the program, and its orphans re-parented here), read from `/proc`.
//! Elsewhere it is today's process group alone.
//!
//! The subreaper is process-wide, and the harness may start other children (a real
//! proxy, `run/real_proxy.rs`, never during a client test): this module reaps only pids
//! it identified as the tree's, each with `waitpid(pid)`, never `waitpid(-1)`, so
//! nobody else's exit status is taken. Children of the harness that existed before the
//! program was spawned are never counted in the tree.

use std::process::Child;
use std::thread;
use std::time::{Duration, Instant};

/// How long the tree has between SIGTERM and SIGKILL.
pub(super) const GRACE: Duration = Duration::from_secs(2);

/// How long SIGKILL is repeated for before the tree is given up on: a process in an
/// uninterruptible sleep (a hung NFS read) dies only when it wakes, and a run must end.
const KILL_FOR: Duration = Duration::from_secs(2);

/// How often the tree is looked at while it is being stopped.
const POLL: Duration = Duration::from_millis(10);

/// The program's process tree, from its spawn on.
#[derive(Debug)]
pub(super) struct Tree {
    #[cfg(target_os = "linux")]
    linux: linux::Owned,
}

/// What was taken before the program was spawned, to tell its tree from the rest.
#[derive(Debug)]
pub(super) struct BeforeSpawn {
    #[cfg(target_os = "linux")]
    linux: linux::Before,
}

impl BeforeSpawn {
    /// Makes the harness a subreaper (Linux) and notes the children it has now.
    pub(super) fn take() -> BeforeSpawn {
        BeforeSpawn {
            #[cfg(target_os = "linux")]
            linux: linux::Before::take(),
        }
    }

    /// The tree rooted at `child`, just spawned.
    pub(super) fn tree(self, child: &Child) -> Tree {
        #[cfg(not(target_os = "linux"))]
        let _ = child;
        Tree {
            #[cfg(target_os = "linux")]
            linux: self.linux.owned(child),
        }
    }
}

impl Tree {
    /// Reaps the orphans re-parented to the harness that have exited, so a long run of a
    /// program that daemonizes per call leaves no zombies piling up. Cheap enough for
    /// once a second.
    pub(super) fn reap_exited(&self) {
        #[cfg(target_os = "linux")]
        self.linux.reap();
    }

    /// SIGTERM to every process of the tree, SIGKILL to what is left after [`GRACE`],
    /// and every one reaped (the program through `child`, so its status stays std's).
    /// Bounded: returns within about `GRACE + KILL_FOR` whatever the tree does.
    pub(super) fn stop(&self, child: &mut Child) {
        let gone = |child: &mut Child| {
            self.reap_exited();
            matches!(child.try_wait(), Ok(Some(_))) && self.alive() == 0
        };
        self.signal(child, Signal::Term);
        let start = Instant::now();
        while start.elapsed() < GRACE {
            if gone(child) {
                return;
            }
            thread::sleep(POLL);
        }
        // Repeated: a process that forks as it dies leaves a child to kill next time.
        let start = Instant::now();
        while start.elapsed() < KILL_FOR {
            self.signal(child, Signal::Kill);
            if gone(child) {
                return;
            }
            thread::sleep(POLL);
        }
    }

    /// Processes of the tree not yet exited (zombies are exited).
    fn alive(&self) -> usize {
        #[cfg(target_os = "linux")]
        {
            self.linux.alive()
        }
        #[cfg(not(target_os = "linux"))]
        {
            0
        }
    }

    fn signal(&self, child: &mut Child, signal: Signal) {
        #[cfg(target_os = "linux")]
        {
            self.linux.signal(signal);
            if matches!(signal, Signal::Kill) {
                let _ = child.kill();
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            // Only the program itself, elsewhere: what it started may outlive it.
            if matches!(signal, Signal::Kill) {
                let _ = child.kill();
            }
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Signal {
    Term,
    Kill,
}

#[cfg(target_os = "linux")]
mod linux {
    use std::collections::{BTreeMap, BTreeSet};
    use std::process::Child;

    use rustix::process::{
        Pid, Signal as S, WaitOptions, getpid, kill_process, kill_process_group, waitpid,
    };

    use super::Signal;

    /// The harness's children before the spawn: not the program's.
    #[derive(Debug)]
    pub(super) struct Before {
        children: BTreeSet<i32>,
    }

    impl Before {
        pub(super) fn take() -> Before {
            // Refused only by a kernel older than 3.4: then orphans go to init as before,
            // and the tree is what is still below the program.
            let _ = rustix::process::set_child_subreaper(Pid::from_raw(1));
            let me = getpid().as_raw_nonzero().get();
            Before {
                children: processes()
                    .into_iter()
                    .filter(|p| p.ppid == me)
                    .map(|p| p.pid)
                    .collect(),
            }
        }

        pub(super) fn owned(self, child: &Child) -> Owned {
            Owned {
                me: getpid().as_raw_nonzero().get(),
                program: i32::try_from(child.id()).unwrap_or(i32::MAX),
                before: self.children,
            }
        }
    }

    #[derive(Debug)]
    pub(super) struct Owned {
        me: i32,
        /// Reaped through its `Child`, never here.
        program: i32,
        before: BTreeSet<i32>,
    }

    /// One line of `/proc/<pid>/stat`, the fields read.
    #[derive(Debug, Clone, Copy)]
    struct Process {
        pid: i32,
        ppid: i32,
        zombie: bool,
    }

    impl Owned {
        /// The tree now: the harness's children begun since the spawn, and everything
        /// below them.
        fn members(&self) -> Vec<Process> {
            let all = processes();
            let mut below: BTreeMap<i32, Vec<Process>> = BTreeMap::new();
            for p in &all {
                below.entry(p.ppid).or_default().push(*p);
            }
            let mut members: Vec<Process> = below
                .get(&self.me)
                .into_iter()
                .flatten()
                .filter(|p| !self.before.contains(&p.pid))
                .copied()
                .collect();
            // Each pid once: `/proc` is not read atomically, and a pid reused meanwhile
            // could make the parent links a cycle.
            let mut seen: BTreeSet<i32> = members.iter().map(|p| p.pid).collect();
            let mut next = 0;
            while let Some(p) = members.get(next).copied() {
                for child in below.get(&p.pid).into_iter().flatten() {
                    if seen.insert(child.pid) {
                        members.push(*child);
                    }
                }
                next += 1;
            }
            members
        }

        pub(super) fn alive(&self) -> usize {
            self.members().iter().filter(|p| !p.zombie).count()
        }

        pub(super) fn signal(&self, signal: Signal) {
            let signal = match signal {
                Signal::Term => S::TERM,
                Signal::Kill => S::KILL,
            };
            // The program's own process group too: what `/proc` cannot show (not
            // mounted, `hidepid`) is still ended, as before the tree was read.
            if let Some(group) = Pid::from_raw(self.program) {
                let _ = kill_process_group(group, signal);
            }
            for p in self.members().iter().filter(|p| !p.zombie) {
                if let Some(pid) = Pid::from_raw(p.pid) {
                    // Gone since it was read is fine.
                    let _ = kill_process(pid, signal);
                }
            }
        }

        /// `waitpid(pid)` for each exited orphan re-parented here; a zombie whose parent
        /// is in the tree is its parent's to reap, or ours once that parent is gone.
        pub(super) fn reap(&self) {
            for p in self.members() {
                if p.zombie
                    && p.ppid == self.me
                    && p.pid != self.program
                    && let Some(pid) = Pid::from_raw(p.pid)
                {
                    let _ = waitpid(Some(pid), WaitOptions::NOHANG);
                }
            }
        }
    }

    /// Every process, from `/proc`; one that vanishes while it is read is left out.
    fn processes() -> Vec<Process> {
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter_map(|pid| {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                parse_stat(pid, &stat)
            })
            .collect()
    }

    /// `pid (comm) state ppid …`: the name may hold spaces and parentheses, so the fields
    /// are read after its last `)`.
    fn parse_stat(pid: i32, stat: &str) -> Option<Process> {
        let (_, rest) = stat.rsplit_once(')')?;
        let mut fields = rest.split_ascii_whitespace();
        let state = fields.next()?;
        let ppid = fields.next()?.parse().ok()?;
        Some(Process {
            pid,
            ppid,
            // `X` (dead) is shown only in the instant of its reaping.
            zombie: state == "Z" || state == "X",
        })
    }

    #[cfg(test)]
    mod tests {
        use super::parse_stat;

        #[test]
        fn a_stat_line_is_read_after_the_names_last_parenthesis() {
            let p = parse_stat(7, "7 (a) b) (c) Z 1 7 7 0 -1").expect("parsed");
            assert_eq!((p.pid, p.ppid, p.zombie), (7, 1, true));
            let p = parse_stat(8, "8 (sleep) S 42 8 8 0").expect("parsed");
            assert_eq!((p.ppid, p.zombie), (42, false));
            assert!(parse_stat(9, "9 (truncated").is_none());
        }
    }
}
