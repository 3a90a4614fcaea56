//! The Sample controller: the tutorial's "print every Sample", done right. Watch-driven (no
//! polling): each add or change is logged with its namespace, name and `testString`, and recorded
//! as a Normal event on the object.

use std::sync::Arc;

use tracing::Instrument;

use app_operator_api::Sample;
use kube::ResourceExt;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::EventType;

use super::{Common, Settings, drain, log_start, primary_cache, reconcile_span};
use crate::reconcile::Error;

pub const NAME: &str = "sample";

pub async fn run(settings: Settings, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
    let (samples, sample_events) = primary_cache::<Sample>(&settings, NAME);
    let controller = Controller::for_stream(sample_events, samples)
        .with_config(controller::Config::default().concurrency(settings.concurrency))
        .graceful_shutdown_on(shutdown);
    let common = Arc::new(Common::new(NAME, &settings));
    log_start(NAME, &settings);
    drain(controller.run(reconcile, error_policy, common)).await;
    tracing::info!(controller = NAME, "Stopped Controller");
}

async fn reconcile(sample: Arc<Sample>, common: Arc<Common>) -> Result<Action, Error> {
    let span = reconcile_span(NAME, sample.as_ref());
    reconcile_object(sample, common).instrument(span).await
}

async fn reconcile_object(sample: Arc<Sample>, common: Arc<Common>) -> Result<Action, Error> {
    let _timer = common.metrics.reconcile_started(NAME);
    let test_string = sample.spec.test_string.as_deref().unwrap_or_default();
    tracing::info!(
        namespace = sample.namespace().unwrap_or_default(),
        name = sample.name_any(),
        test_string,
        "Observed Sample"
    );
    let note = format!("testString: {test_string:?}");
    common
        .publish(
            sample.as_ref(),
            EventType::Normal,
            "Observed",
            "Reconcile",
            note,
        )
        .await;
    common.metrics.reconcile_finished(NAME, None);
    Ok(Action::await_change())
}

fn error_policy(sample: Arc<Sample>, error: &Error, common: Arc<Common>) -> Action {
    common.retry(sample.as_ref(), error)
}
