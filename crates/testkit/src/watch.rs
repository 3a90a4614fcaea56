//! Watches a test relies on, each in a task of its own: one that fails or ends says so when the
//! test reads what it recorded, instead of leaving the record silently incomplete.

use std::fmt::Display;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use futures::{Stream, StreamExt};
use tokio::task::JoinHandle;

/// A watch stream consumed in the background until dropped or [`Watch::stop`]ped.
pub struct Watch {
    what: String,
    /// Why the stream stopped by itself: its first error, or its end.
    ended: Arc<Mutex<Option<String>>>,
    task: JoinHandle<()>,
}

impl Watch {
    /// Hands every item of `stream` (the watch on `what`) to `each`, in order. Its first error
    /// or its end stops it: from then on the record has a gap, and [`Watch::alive`] says so.
    pub fn spawn<S, T, E, F, Fut>(what: &str, stream: S, mut each: F) -> Watch
    where
        S: Stream<Item = Result<T, E>> + Send + 'static,
        T: Send,
        E: Display + Send,
        F: FnMut(T) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send,
    {
        let ended = Arc::new(Mutex::new(None));
        let task = tokio::spawn({
            let ended = ended.clone();
            async move {
                let mut stream = std::pin::pin!(stream);
                let reason = loop {
                    match stream.next().await {
                        Some(Ok(item)) => each(item).await,
                        Some(Err(error)) => break format!("failed: {error}"),
                        None => break "ended".to_owned(),
                    }
                };
                *ended.lock().unwrap_or_else(PoisonError::into_inner) = Some(reason);
            }
        });
        Watch {
            what: what.to_owned(),
            ended,
            task,
        }
    }

    /// `Err` saying why if the watch no longer runs (what it recorded is incomplete).
    pub fn alive(&self) -> Result<(), String> {
        // Finished is read first: a stream that stopped by itself has its reason stored by then.
        let finished = self.task.is_finished();
        let ended = self
            .ended
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        match ended {
            Some(reason) => Err(format!("the watch on {} {reason}", self.what)),
            None if finished => Err(format!(
                "the watch on {} stopped: its handler panicked",
                self.what
            )),
            None => Ok(()),
        }
    }

    /// Fails the test unless the watch still runs.
    pub fn assert_alive(&self) {
        if let Err(error) = self.alive() {
            panic!("{error}");
        }
    }

    /// Ends the watch once the test is done with it, failing the test if it had stopped by
    /// itself before; returns once the handler no longer runs.
    pub async fn stop(mut self) {
        self.assert_alive();
        self.task.abort();
        let _ = (&mut self.task).await;
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    type Sender = tokio::sync::mpsc::UnboundedSender<Result<u32, String>>;

    fn channel() -> (Sender, impl Stream<Item = Result<u32, String>> + Send) {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        (tx, futures::stream::poll_fn(move |cx| rx.poll_recv(cx)))
    }

    async fn stopped(watch: &Watch) -> String {
        crate::eventually(Duration::from_secs(5), "the watch to stop", || async {
            watch.alive().err()
        })
        .await
    }

    #[tokio::test]
    async fn a_failed_ended_or_panicked_watch_says_so() {
        let (tx, stream) = channel();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let watch = Watch::spawn("numbers", stream, {
            let seen = seen.clone();
            move |n| {
                seen.lock().unwrap().push(n);
                async {}
            }
        });
        tx.send(Ok(1)).unwrap();
        crate::eventually(Duration::from_secs(5), "the first item", || async {
            (seen.lock().unwrap().len() == 1).then_some(())
        })
        .await;
        assert_eq!(watch.alive(), Ok(()));
        tx.send(Err("connection reset".into())).unwrap();
        tx.send(Ok(2)).unwrap();
        assert_eq!(
            stopped(&watch).await,
            "the watch on numbers failed: connection reset"
        );
        assert_eq!(*seen.lock().unwrap(), [1], "nothing after the error");

        let (tx, stream) = channel();
        let watch = Watch::spawn("nothing", stream, |_| async {});
        drop(tx);
        assert_eq!(stopped(&watch).await, "the watch on nothing ended");

        let (tx, stream) = channel();
        let watch = Watch::spawn("odd numbers", stream, |n| async move {
            assert!(n % 2 == 1, "{n} is even");
        });
        tx.send(Ok(2)).unwrap();
        assert_eq!(
            stopped(&watch).await,
            "the watch on odd numbers stopped: its handler panicked"
        );
        let stop = tokio::spawn(watch.stop());
        assert!(stop.await.is_err(), "stop passed on a stopped watch");
    }
}
