// A typical kubebuilder/controller-runtime operator for MyApp, a baseline for benchmarking the
// Rust operator against: a Deployment and a Service per MyApp, status from the Deployment.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

var (
	scheme   = runtime.NewScheme()
	setupLog = ctrl.Log.WithName("setup")
)

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(AddToScheme(scheme))
}

func main() {
	var metricsAddr, probeAddr string
	var enableLeaderElection bool
	var maxConcurrentReconciles int
	var watchNamespace string
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0", "The address the metrics endpoint binds to (plain HTTP), e.g. 127.0.0.1:8080. \"0\" disables it.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "The address the probe endpoint binds to.")
	flag.BoolVar(&enableLeaderElection, "leader-elect", false, "Enable leader election for the controller manager.")
	flag.IntVar(&maxConcurrentReconciles, "max-concurrent-reconciles", 1, "How many MyApps are reconciled at once.")
	flag.StringVar(&watchNamespace, "watch-namespace", "", "Watch only this namespace (default: all namespaces).")
	opts := zap.Options{Development: true}
	opts.BindFlags(flag.CommandLine)
	flag.Parse() // --kubeconfig is registered by controller-runtime's config package

	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))

	var cacheOpts cache.Options
	if watchNamespace != "" {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{watchNamespace: {}}
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 scheme,
		Cache:                  cacheOpts,
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress: probeAddr,
		LeaderElection:         enableLeaderElection,
		LeaderElectionID:       "bench-operator.example.com",
	})
	if err != nil {
		setupLog.Error(err, "unable to start manager")
		os.Exit(1)
	}
	if err := (&MyAppReconciler{
		Client:   mgr.GetClient(),
		Scheme:   mgr.GetScheme(),
		Recorder: mgr.GetEventRecorder("myapp-controller"),
	}).SetupWithManager(mgr, maxConcurrentReconciles); err != nil {
		setupLog.Error(err, "unable to create controller", "controller", "MyApp")
		os.Exit(1)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		setupLog.Error(err, "unable to set up health check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		setupLog.Error(err, "unable to set up ready check")
		os.Exit(1)
	}
	setupLog.Info("starting manager")
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		setupLog.Error(err, "problem running manager")
		os.Exit(1)
	}
}

// MyAppReconciler reconciles a MyApp object.
type MyAppReconciler struct {
	client.Client
	Scheme   *runtime.Scheme
	Recorder events.EventRecorder
}

// +kubebuilder:rbac:groups=example.com,resources=myapps,verbs=get;list;watch
// +kubebuilder:rbac:groups=example.com,resources=myapps/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=example.com,resources=myapps/finalizers,verbs=update
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

func (r *MyAppReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)

	var app MyApp
	if err := r.Get(ctx, req.NamespacedName, &app); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !app.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // the garbage collector removes the children
	}

	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: app.Name, Namespace: app.Namespace}}
	depOp, err := controllerutil.CreateOrUpdate(ctx, r.Client, dep, func() error {
		mutateDeployment(&app, dep)
		return controllerutil.SetControllerReference(&app, dep, r.Scheme)
	})
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("deployment: %w", err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: app.Name, Namespace: app.Namespace}}
	svcOp, err := controllerutil.CreateOrUpdate(ctx, r.Client, svc, func() error {
		mutateService(&app, svc)
		return controllerutil.SetControllerReference(&app, svc, r.Scheme)
	})
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("service: %w", err)
	}
	if depOp == controllerutil.OperationResultCreated || svcOp == controllerutil.OperationResultCreated {
		r.Recorder.Eventf(&app, nil, corev1.EventTypeNormal, "Created", "Apply", "Created Deployment %s, Service %s", dep.Name, svc.Name)
	}
	log.V(1).Info("children reconciled", "deployment", depOp, "service", svcOp)

	status := app.DeepCopy().Status
	status.ObservedGeneration = app.Generation
	status.ReadyReplicas = dep.Status.ReadyReplicas
	status.AvailableReplicas = dep.Status.AvailableReplicas
	status.Selector = fmt.Sprintf("app.kubernetes.io/instance=%s,app.kubernetes.io/name=%s", app.Name, app.Name)
	want := replicas(&app)
	message := fmt.Sprintf("%d of %d replicas available", dep.Status.AvailableReplicas, want)
	ready := metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: "Progressing", Message: message, ObservedGeneration: app.Generation}
	// Rolled out as ours judges it: the Deployment saw its spec and no old Pod is left.
	rolledOut := dep.Status.ObservedGeneration >= dep.Generation &&
		dep.Status.UpdatedReplicas >= want && dep.Status.Replicas == dep.Status.UpdatedReplicas
	if rolledOut && dep.Status.AvailableReplicas >= want {
		ready.Status, ready.Reason = metav1.ConditionTrue, "DeploymentReady"
	}
	meta.SetStatusCondition(&status.Conditions, ready)
	if equality.Semantic.DeepEqual(status, app.Status) {
		return ctrl.Result{}, nil
	}
	now := metav1.Now()
	status.LastUpdateTime = &now
	app.Status = status
	if err := r.Status().Update(ctx, &app); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}

func (r *MyAppReconciler) SetupWithManager(mgr ctrl.Manager, maxConcurrentReconciles int) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&MyApp{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: maxConcurrentReconciles}).
		Named("myapp").
		Complete(r)
}

func replicas(app *MyApp) int32 {
	if app.Spec.Replicas == nil {
		return 1
	}
	return *app.Spec.Replicas
}

func port(app *MyApp) int32 {
	if app.Spec.Port == 0 {
		return 8080
	}
	return app.Spec.Port
}

func selectorLabels(app *MyApp) map[string]string {
	return map[string]string{"app.kubernetes.io/name": app.Name, "app.kubernetes.io/instance": app.Name}
}

// setLabels adds the selector labels and managed-by to an object's labels, keeping others.
func setLabels(obj *metav1.ObjectMeta, app *MyApp) {
	if obj.Labels == nil {
		obj.Labels = map[string]string{}
	}
	for k, v := range selectorLabels(app) {
		obj.Labels[k] = v
	}
	obj.Labels["app.kubernetes.io/managed-by"] = "app-operator"
}

// mutateDeployment sets the fields the operator owns and leaves those the API server defaulted,
// so an unchanged MyApp makes no update.
func mutateDeployment(app *MyApp, dep *appsv1.Deployment) {
	setLabels(&dep.ObjectMeta, app)
	dep.Spec.Replicas = ptr(replicas(app))
	if dep.CreationTimestamp.IsZero() { // the selector is immutable
		dep.Spec.Selector = &metav1.LabelSelector{MatchLabels: selectorLabels(app)}
	}
	dep.Spec.Template.Labels = selectorLabels(app)
	pod := &dep.Spec.Template.Spec
	if len(pod.Containers) != 1 || pod.Containers[0].Name != "app" {
		pod.Containers = []corev1.Container{{Name: "app"}}
	}
	c := &pod.Containers[0]
	c.Image = app.Spec.Image
	c.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: port(app), Protocol: corev1.ProtocolTCP}}
	c.Env = app.Spec.Env
}

func mutateService(app *MyApp, svc *corev1.Service) {
	setLabels(&svc.ObjectMeta, app)
	svc.Spec.Type = app.Spec.ServiceType
	if svc.Spec.Type == "" {
		svc.Spec.Type = corev1.ServiceTypeClusterIP
	}
	svc.Spec.Selector = selectorLabels(app)
	var nodePort int32 // allocated by the API server: keep it
	if len(svc.Spec.Ports) == 1 && svc.Spec.Type != corev1.ServiceTypeClusterIP {
		nodePort = svc.Spec.Ports[0].NodePort
	}
	svc.Spec.Ports = []corev1.ServicePort{{
		Name: "http", Port: port(app), TargetPort: intstr.FromString("http"),
		Protocol: corev1.ProtocolTCP, NodePort: nodePort,
	}}
}

func ptr[T any](v T) *T { return &v }
