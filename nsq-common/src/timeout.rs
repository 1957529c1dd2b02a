//! A future raced against a glommio timer: the one timeout helper of the programs that run
//! glommio executors (broker, client library, tools). Nothing is allocated: the race is a plain
//! `futures_lite::future::or` of the two futures, the work polled first.

use std::future::Future;
use std::time::Duration;

/// `fut`'s output, or `None` when `d` passes first.
pub async fn with_timeout<T>(d: Duration, fut: impl Future<Output = T>) -> Option<T> {
    futures_lite::future::or(async { Some(fut.await) }, async {
        glommio::timer::sleep(d).await;
        None
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::with_timeout;
    use std::time::Duration;

    #[test]
    fn the_first_to_finish_wins() {
        let ex = glommio::LocalExecutorBuilder::default().make();
        let ex = ex.unwrap_or_else(|e| panic!("a glommio executor: {e}"));
        ex.run(async {
            let ready = with_timeout(Duration::from_secs(5), async { 7 }).await;
            assert_eq!(ready, Some(7));
            let late = with_timeout(
                Duration::from_millis(10),
                glommio::timer::sleep(Duration::from_secs(5)),
            )
            .await;
            assert_eq!(late, None);
        });
    }
}
