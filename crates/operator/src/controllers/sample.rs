//! The Sample controller: the tutorial's "print every Sample", done right. Watch-driven (no
//! polling): each new version (generation) is logged with its namespace, name and `testString`,
//! and recorded as a Normal event on the object, once: `status.observedGeneration` remembers it
//! across restarts.

use app_operator_api::{Sample, SampleStatus};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;

use super::Wiring;
use crate::reconcile::runner::{Announcement, Reconciled, Reconciler, Runner, Target};

pub const NAME: &str = "sample";

pub async fn run(wiring: Wiring, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
    Runner::<Sample>::new(NAME, &wiring.settings)
        .run(SampleReconciler, shutdown)
        .await;
}

struct SampleReconciler;

impl Reconciler for SampleReconciler {
    type Object = Sample;
    type Memory = ();

    async fn reconcile(&self, target: &Target<'_, Sample>) -> Reconciled<SampleStatus> {
        let sample = target.object;
        let generation = sample.metadata.generation;
        let observed = sample.status.as_ref().and_then(|s| s.observed_generation);
        let mut announce = Vec::new();
        if observed != generation {
            let test_string = sample.spec.test_string.as_deref().unwrap_or_default();
            tracing::info!(
                namespace = target.namespace,
                name = target.name,
                test_string,
                "Observed Sample"
            );
            announce.push(Announcement {
                type_: EventType::Normal,
                reason: "Observed".into(),
                action: "Reconcile",
                note: format!("testString: {test_string:?}"),
            });
        }
        let status = SampleStatus {
            observed_generation: generation,
        };
        Reconciled::status(status, Ok(()), Action::await_change()).announcing(announce)
    }
}
