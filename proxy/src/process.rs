//! Running the proxy as a process: binding the listeners, the worker threads, the health
//! checks, the admin and status APIs, and at SIGTERM or SIGINT the drain (connections, then
//! plugins' queues, then the access log).

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::server::{worker, Proxy, Shared};

impl Proxy {
    /// Binds the listeners, serves until SIGTERM or SIGINT, then drains and returns.
    pub fn serve(&self) -> io::Result<()> {
        let opts = &self.shared().opts;
        let workers = opts.worker_threads.max(1);
        let listeners = (0..workers)
            .map(|_| {
                let plain = bind_reuseport(opts.listen, "--listen")?;
                let tls = opts
                    .tls_listen
                    .map(|a| bind_reuseport(a, "--tls-listen"))
                    .transpose()?;
                Ok((plain, tls))
            })
            .collect::<io::Result<Vec<_>>>()?;
        let admin = bind_plain(opts.admin_listen, "--admin-listen")?;
        crate::upstream::forbid(vec![opts.admin_listen]);
        let status = opts
            .status_listen
            .map(|a| bind_plain(a, "--status-listen"))
            .transpose()?;
        tracing::info!(
            listen = %opts.listen,
            tls_listen = ?opts.tls_listen,
            admin = %opts.admin_listen,
            status = ?opts.status_listen,
            workers,
            "weir proxy started"
        );

        let (stop_tx, stop_rx) = watch::channel(false);
        let mut threads = Vec::new();
        for (i, l) in listeners.into_iter().enumerate() {
            let shared = self.shared().clone();
            let stop = stop_rx.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("weir-worker-{i}"))
                    .spawn(move || worker(i, shared, l, stop))?,
            );
        }

        std::thread::Builder::new()
            .name("weir-health".into())
            .spawn({
                let shared = self.shared().clone();
                let stop = stop_rx.clone();
                move || match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt.block_on(health_checks(shared, stop)),
                    Err(e) => tracing::error!(error = %e, "health checks could not start"),
                }
            })?;

        let main_rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        main_rt.block_on(async {
            let admin = tokio::net::TcpListener::from_std(admin)?;
            let admin_task = tokio::spawn(crate::admin::serve(self.clone(), admin, false));
            // The status listener outlives the signal: while connections drain, `/readyz`
            // answers 503 there, so a load balancer stops sending before the listeners close.
            if let Some(status) = status {
                let status = tokio::net::TcpListener::from_std(status)?;
                std::thread::Builder::new()
                    .name("weir-status".into())
                    .spawn({
                        let proxy = self.clone();
                        move || {
                            let rt = tokio::runtime::Builder::new_current_thread()
                                .enable_all()
                                .build();
                            match rt {
                                Ok(rt) => {
                                    let _ = rt.block_on(crate::admin::serve(proxy, status, true));
                                }
                                Err(e) => {
                                    tracing::error!(error = %e, "the status listener could not start")
                                }
                            }
                        }
                    })?;
            }
            let mut signals = Signals::new();
            signals.next().await;
            self.shared().unready.store(true, Ordering::Relaxed);
            if !opts.shutdown_delay.is_zero() {
                tracing::info!(
                    delay_s = opts.shutdown_delay.as_secs_f64(),
                    "shutting down: /readyz answers 503, serving on until the delay is over"
                );
                // A second signal cuts the delay short.
                let _ = tokio::time::timeout(opts.shutdown_delay, signals.next()).await;
            }
            tracing::info!(
                grace_s = opts.shutdown_grace.as_secs_f64(),
                "shutting down: draining connections"
            );
            self.shared().stopping.store(true, Ordering::Relaxed);
            let _ = stop_tx.send(true);
            admin_task.abort();
            io::Result::Ok(())
        })?;
        let stopping = Instant::now();
        for t in threads {
            let _ = t.join();
        }
        // Plugins flush what they hold (log shippers' queues) within what is left of the grace.
        let left = opts
            .shutdown_grace
            .saturating_sub(stopping.elapsed())
            .max(Duration::from_secs(1));
        let stops = self.shared().registry.stop();
        if !stops.is_empty() {
            main_rt.block_on(async {
                let all = async {
                    for s in stops {
                        s.await;
                    }
                };
                if tokio::time::timeout(left, all).await.is_err() {
                    tracing::warn!("plugins did not stop within the grace period");
                }
            });
        }
        if let Some(log) = &self.shared().access_log {
            log.drain(Duration::from_secs(2));
        }
        tracing::info!("weir proxy stopped");
        Ok(())
    }
}

/// SIGTERM and SIGINT, listened to from the start: a signal sent while the proxy is busy with
/// the previous one (the shutdown delay) is not lost.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> Signals {
        use tokio::signal::unix::{signal, SignalKind};
        Signals {
            term: signal(SignalKind::terminate()).expect("SIGTERM handler"),
            int: signal(SignalKind::interrupt()).expect("SIGINT handler"),
        }
    }

    /// The next SIGTERM or SIGINT.
    async fn next(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

/// A non-blocking listener on `addr`; the error names the address and the flag.
fn bind_plain(addr: SocketAddr, flag: &str) -> io::Result<std::net::TcpListener> {
    let l = std::net::TcpListener::bind(addr).map_err(|e| naming(e, addr, flag))?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// `e` with the address (and the flag that set it) in front: "Address already in use" alone
/// does not say which of the proxy's listeners failed.
fn naming(e: io::Error, addr: SocketAddr, flag: &str) -> io::Error {
    io::Error::new(e.kind(), format!("{flag} {addr}: {e}"))
}

fn bind_reuseport(addr: SocketAddr, flag: &str) -> io::Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_tcp_nodelay(true)?;
    socket
        .bind(&addr.into())
        .map_err(|e| naming(e, addr, flag))?;
    socket.listen(4096)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// Runs the active health probes of the table in service, and those of the next one when it
/// is swapped in, until the proxy stops.
async fn health_checks(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut tables = shared.tables.subscribe();
    loop {
        tables.borrow_and_update();
        let probes = shared.runtime.load().probes();
        let run = async {
            if probes.is_empty() {
                std::future::pending::<()>().await;
            }
            crate::health::probe::run_all(probes).await;
        };
        tokio::select! {
            () = run => return,
            changed = tables.changed() => if changed.is_err() { return },
            _ = stop.changed() => return,
        }
    }
}
