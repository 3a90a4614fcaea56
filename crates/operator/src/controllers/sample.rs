//! The Sample controller: the tutorial's "print every Sample", done right. Watch-driven (no
//! polling): each add or change is logged with its namespace, name and `testString`, and recorded
//! as a Normal event on the object.

use app_operator_api::Sample;
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
        Ok(Action::await_change())
    }
}
