//! Starting a worker: its socket, its three segments and the shared heap
//! placed at fds 3 to 7 between fork and exec, its program and the
//! `load` message sent, its `ready` read.
//!
//! Unsafe code: descriptor placement and signals between fork and exec (libc).

#![allow(unsafe_code)]

use super::*;

impl Process {
    /// Starts worker `instance` and loads the model in it.
    pub(crate) fn start(launch: &Launch, instance: usize) -> Result<Process, StartError> {
        let fail = |what: &str, e: io::Error| StartError::Process(format!("{what}: {e}"));
        let (mut ours, theirs) = UnixStream::pair().map_err(|e| fail("socketpair", e))?;
        let name = format!("wirespeed-{}-{instance}", launch.model);
        let inputs = InputSegment::new(&format!("{name}-in")).map_err(|e| fail("memfd", e))?;
        let outputs = OutputSegment::new(&format!("{name}-out")).map_err(|e| fail("memfd", e))?;
        let calls = CallSegment::new(&format!("{name}-calls")).map_err(|e| fail("memfd", e))?;
        // Each descriptor is first duplicated above 7, so that placing one
        // at 3 to 7 cannot overwrite another before it is placed. The
        // shared heap, when there is one, is the fifth (`HEAP_FD`).
        let mut fds = [
            theirs.as_raw_fd(),
            inputs.fd(),
            outputs.fd(),
            calls.fd(),
            -1,
        ];
        let count = match wirespeed_core::shared_heap::fd() {
            Some(heap) => {
                fds[4] = heap;
                5
            }
            None => 4,
        };
        let mut command = Command::new(&launch.python);
        command
            .arg("-c")
            .arg(BOOTSTRAP)
            .arg("wirespeed-worker")
            .arg(&launch.model)
            .arg(instance.to_string())
            .env("WIRESPEED_MODEL", &launch.model)
            .env("WIRESPEED_INSTANCE", instance.to_string())
            .envs(launch.env.iter().map(|(k, v)| (k, v)));
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            command.pre_exec(move || {
                let mut high = [0; 5];
                for (slot, &fd) in high.iter_mut().zip(&fds[..count]) {
                    *slot = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10);
                    if *slot < 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
                for (i, &fd) in high[..count].iter().enumerate() {
                    place_fd(fd, 3 + i as RawFd)?;
                }
                // Its own process group, so a terminal's Ctrl-C reaches the
                // server alone; and killed if the thread that started it ends
                // (the server's keeper of it, which lives as long as it).
                libc::setpgid(0, 0);
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        // What the model prints, and its tracebacks, become log lines of
        // the server's own, in its format (`--log-format json` included).
        let (output, output_end) = io::pipe().map_err(|e| fail("pipe", e))?;
        command
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::null())
            .stdout(output_end.try_clone().map_err(|e| fail("pipe", e))?)
            .stderr(output_end);
        let child = command.spawn().map_err(|e| {
            StartError::Spawn(format!(
                "cannot start the model's Python '{}': {e}",
                launch.python
            ))
        })?;
        drop(command);
        drop(theirs);
        let model = launch.model.clone();
        std::thread::Builder::new()
            .name(format!("python-{}-{instance}-log", launch.model))
            .spawn(move || output::relay(output, &model, instance))
            .map_err(|e| fail("a log thread", e))?;
        let pid = child.id();
        let mut process = Process {
            child,
            socket: ours.try_clone().map_err(|e| fail("socket", e))?,
            inputs,
            outputs,
            calls,
            pid,
            decoupled: false,
            metadata: None,
            answer_linger: Duration::ZERO,
            heap: false,
        };
        let handshake = (|| -> io::Result<Reply> {
            let program = u32::try_from(WORKER.len()).map_err(io::Error::other)?;
            ours.write_all(&program.to_le_bytes())?;
            ours.write_all(WORKER.as_bytes())?;
            wire::send(&mut ours, &launch.load_for(instance))?;
            // `initialize` may make and use custom metrics meanwhile; the
            // load's time bounds all of it, not each message.
            let until = Instant::now() + launch.load_timeout;
            let reply = loop {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break Err(io::ErrorKind::TimedOut.into());
                }
                ours.set_read_timeout(Some(left))?;
                match wire::receive(&mut ours)?.0 {
                    Reply::Metric {
                        metric,
                        pending,
                        call,
                    } => wire::send(
                        &mut ours,
                        &crate::metrics::answer(&launch.model, metric, pending, call),
                    )?,
                    reply => break Ok(reply),
                }
            };
            // From now on `poll` waits for an answer to begin; these bound
            // the rest, so a worker that stops mid-message, or stops
            // reading, is replaced rather than holding its keeper forever.
            ours.set_read_timeout(Some(MESSAGE_TIMEOUT))?;
            ours.set_write_timeout(Some(MESSAGE_TIMEOUT))?;
            reply
        })();
        match handshake {
            Ok(Reply::Ready {
                pid,
                python,
                metrics,
                decoupled,
                metadata,
                heap,
            }) => {
                crate::metrics::apply(&launch.model, metrics);
                process.decoupled = decoupled;
                process.heap = heap;
                process.metadata = metadata.filter(|m| !m.is_null()).map(|m| m.to_string());
                tracing::info!(model = %launch.model, instance, pid, python = %python, "python worker ready");
                Ok(process)
            }
            Ok(Reply::Failed { error }) => {
                process.kill();
                Err(StartError::Load(error))
            }
            Ok(other) => {
                process.kill();
                Err(StartError::Process(format!(
                    "the worker answered {other:?} to its load"
                )))
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                process.kill();
                Err(StartError::Process(format!(
                    "loading took longer than {:?} (load_timeout_s)",
                    launch.load_timeout
                )))
            }
            Err(_) => {
                let status = process.reap();
                Err(StartError::Process(format!(
                    "the worker {} while loading",
                    ended(status)
                )))
            }
        }
    }
}

fn place_fd(from: RawFd, to: RawFd) -> io::Result<()> {
    // SAFETY: plain descriptor calls between fork and exec.
    unsafe {
        if from == to {
            let flags = libc::fcntl(to, libc::F_GETFD);
            if flags < 0 || libc::fcntl(to, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                return Err(io::Error::last_os_error());
            }
        } else if libc::dup2(from, to) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}
