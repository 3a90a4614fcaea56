//! The Sample controller: the tutorial's "print every Sample", done right. Watch-driven (no
//! polling): each new version (generation) is logged with its namespace, name and `testString`,
//! and recorded as a Normal event on the object, once: `status.observedGeneration` remembers it
//! across restarts.

use app_operator_api::{Sample, SampleStatus};
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;

use crate::reconcile::Error;
use crate::reconcile::runner::{Reconciler, Runner, Settings, Shared};

pub const NAME: &str = "sample";

pub async fn run(settings: Settings, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
    Runner::<Sample>::new(NAME, &settings)
        .run(SampleReconciler, shutdown)
        .await;
}

struct SampleReconciler;

impl Reconciler for SampleReconciler {
    type Object = Sample;

    async fn reconcile(&self, sample: &Sample, shared: &Shared) -> Result<Action, Error> {
        let generation = sample.metadata.generation;
        let observed = sample.status.as_ref().and_then(|s| s.observed_generation);
        if observed != generation {
            let test_string = sample.spec.test_string.as_deref().unwrap_or_default();
            tracing::info!(
                namespace = sample.namespace().unwrap_or_default(),
                name = sample.name_any(),
                test_string,
                "Observed Sample"
            );
            let note = format!("testString: {test_string:?}");
            shared
                .publish(sample, EventType::Normal, "Observed", "Reconcile", note)
                .await;
        }
        let status = SampleStatus {
            observed_generation: generation,
        };
        shared
            .write_status(sample, sample.status.as_ref(), status, |_| {}, Ok(()))
            .await
            .map(|()| Action::await_change())
    }
}
