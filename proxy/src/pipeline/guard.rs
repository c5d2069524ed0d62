//! Plugin calls guarded against errors and panics, also while a plugin's future is polled.

use std::any::Any;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll};

use http::StatusCode;

use super::plugin::{EarlyResponse, Flow, Handled, PhaseFuture, PluginError, PluginInstance, Step};

const INTERNAL_ERROR: &str = "An unexpected error occurred";

fn internal_error() -> EarlyResponse {
    EarlyResponse::message(StatusCode::INTERNAL_SERVER_ERROR, INTERNAL_ERROR)
}

fn panic_message(panic: &(dyn Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

fn report_panic(plugin: &PluginInstance, phase: &str, panic: &(dyn Any + Send)) {
    let msg = panic_message(panic);
    tracing::error!(plugin = plugin.name, id = %plugin.id, phase, panic = %msg, "plugin panicked");
}

fn report_error(plugin: &PluginInstance, phase: &str, e: &PluginError) {
    tracing::error!(plugin = plugin.name, id = %plugin.id, phase, error = %e, "plugin failed");
}

/// Runs a synchronous handler; an error or a panic is logged and becomes `Err(())`.
pub(super) fn sync<T>(
    plugin: &PluginInstance,
    phase: &str,
    f: impl FnOnce() -> Result<T, PluginError>,
) -> Result<T, ()> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => {
            report_error(plugin, phase, &e);
            Err(())
        }
        Err(panic) => {
            report_panic(plugin, phase, &*panic);
            Err(())
        }
    }
}

/// What a handler of a phase that may wait asked for: a flow now, or a future to await with
/// [`finish`].
pub(super) enum Called<'a> {
    Now(Flow),
    Later(PhaseFuture<'a, Result<Flow, PluginError>>),
}

/// Calls a handler of a phase that may wait. A result ready now is settled here, so the ready
/// path builds no future; errors and panics become a 500 answer.
pub(super) fn call<'a>(
    plugin: &PluginInstance,
    phase: &str,
    f: impl FnOnce() -> Handled<'a>,
) -> Called<'a> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Step::Ready(r)) => Called::Now(outcome(plugin, phase, r)),
        Ok(Step::Wait(fut)) => Called::Later(fut),
        Err(panic) => {
            report_panic(plugin, phase, &*panic);
            Called::Now(Flow::Respond(internal_error()))
        }
    }
}

/// Awaits a handler's future; errors and panics (also inside the future) become a 500 answer.
pub(super) async fn finish(
    plugin: &PluginInstance,
    phase: &str,
    fut: PhaseFuture<'_, Result<Flow, PluginError>>,
) -> Flow {
    match (Unwinding { fut }).await {
        Ok(r) => outcome(plugin, phase, r),
        Err(panic) => {
            report_panic(plugin, phase, &*panic);
            Flow::Respond(internal_error())
        }
    }
}

fn outcome(plugin: &PluginInstance, phase: &str, r: Result<Flow, PluginError>) -> Flow {
    match r {
        Ok(flow) => flow,
        Err(e) => {
            report_error(plugin, phase, &e);
            Flow::Respond(internal_error())
        }
    }
}

/// A plugin's future whose panics are caught at every poll.
struct Unwinding<'a, T> {
    fut: PhaseFuture<'a, T>,
}

impl<T> Future for Unwinding<'_, T> {
    type Output = Result<T, Box<dyn Any + Send>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match catch_unwind(AssertUnwindSafe(|| self.fut.as_mut().poll(cx))) {
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}
