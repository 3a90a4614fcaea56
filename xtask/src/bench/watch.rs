//! What the benchmark measures: when each object converged, recorded from watches by the admin
//! (not by the operator under test).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use app_operator::api::MyApp;
use app_operator::api::conditions::READY;
use app_operator::reconcile::conditions::is_true;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;

/// Convergence over time: seconds since the first create, and how many objects had converged.
#[derive(Serialize, Clone, Default)]
pub struct Series {
    pub points: Vec<(f64, usize)>,
}

impl Series {
    pub fn from_times(mut times: Vec<f64>) -> Series {
        times.sort_by(f64::total_cmp);
        Series {
            points: times
                .into_iter()
                .enumerate()
                .map(|(i, t)| (t, i + 1))
                .collect(),
        }
    }

    /// When the last object converged (None: not all did).
    pub fn total(&self, expected: usize) -> Option<f64> {
        (self.points.len() >= expected).then(|| self.points.last().map_or(0.0, |p| p.0))
    }
}

/// Per object name, the first time `converged` held for it (seconds since `start`); the watch
/// stops when this is dropped.
pub struct Recorded {
    seen: Arc<Mutex<HashMap<String, f64>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Recorded {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Recorded {
    pub fn start<K>(api: Api<K>, start: Instant, converged: fn(&K) -> bool) -> Recorded
    where
        K: Resource<DynamicType = ()>
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned
            + Send
            + Sync
            + 'static,
    {
        let seen = Arc::new(Mutex::new(HashMap::new()));
        let task = {
            let seen = seen.clone();
            tokio::spawn(async move {
                let events = watcher(api, watcher::Config::default())
                    .default_backoff()
                    .applied_objects();
                futures::pin_mut!(events);
                while let Some(Ok(object)) = events.next().await {
                    if converged(&object) {
                        let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
                        seen.entry(object.name_any())
                            .or_insert_with(|| start.elapsed().as_secs_f64());
                    }
                }
            })
        };
        Recorded { seen, task }
    }

    pub fn times(&self) -> HashMap<String, f64> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// When each name in a namespace had both its Deployment and its Service.
pub struct ChildPairs {
    deployments: Recorded,
    services: Recorded,
}

impl ChildPairs {
    pub fn start(admin: &Client, namespace: &str, start: Instant) -> ChildPairs {
        ChildPairs {
            deployments: Recorded::start(
                Api::<Deployment>::namespaced(admin.clone(), namespace),
                start,
                |_| true,
            ),
            services: Recorded::start(
                Api::<Service>::namespaced(admin.clone(), namespace),
                start,
                |_| true,
            ),
        }
    }

    /// For each name with both, the later of the two times.
    pub fn times(&self) -> Vec<f64> {
        let services = self.services.times();
        self.deployments
            .times()
            .iter()
            .filter_map(|(name, t)| Some(t.max(*services.get(name)?)))
            .collect()
    }
}

/// MyApps converging in a namespace: when each had its Deployment and Service, and when each
/// read Ready.
pub struct MyAppsConverging {
    since: Instant,
    children: ChildPairs,
    ready: Recorded,
}

/// When each of a pass's MyApps was created (the user's create answered), had its Deployment and
/// Service, and read Ready, in seconds since the pass started.
pub struct Timeline {
    pub created: Series,
    pub children: Series,
    pub ready: Series,
}

impl MyAppsConverging {
    /// Starts recording, from now.
    pub fn start(admin: &Client, namespace: &str) -> MyAppsConverging {
        let start = Instant::now();
        MyAppsConverging {
            since: start,
            children: ChildPairs::start(admin, namespace, start),
            ready: Recorded::start(
                Api::<MyApp>::namespaced(admin.clone(), namespace),
                start,
                myapp_ready,
            ),
        }
    }

    /// When recording started: the times of the series are counted from it.
    pub fn since(&self) -> Instant {
        self.since
    }

    /// Waits until `n` MyApps read Ready (or `timeout`), and returns the pass's timeline with
    /// the user's creates (`created`) in it.
    pub async fn wait(&self, created: Series, n: usize, timeout: std::time::Duration) -> Timeline {
        super::cluster::wait_for(timeout, || async {
            (self.ready.times().len() >= n).then_some(())
        })
        .await;
        Timeline {
            created,
            children: Series::from_times(self.children.times()),
            ready: Series::from_times(self.ready.times().into_values().collect()),
        }
    }
}

/// Ready=True for the MyApp's current generation.
pub fn myapp_ready(app: &MyApp) -> bool {
    app.status.as_ref().is_some_and(|s| {
        s.observed_generation == app.metadata.generation && is_true(&s.conditions, READY)
    })
}

pub fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}
