package main

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	crscheme "sigs.k8s.io/controller-runtime/pkg/scheme"
)

// The MyApp API of config/crd/bases/example.com_myapps.yaml, as kubebuilder would lay it out
// (api/v1/myapp_types.go). Only the fields this operator acts on are declared: the others
// (autoScaling, resources) decode as unknown fields and are dropped.

var (
	GroupVersion  = schema.GroupVersion{Group: "example.com", Version: "v1"}
	SchemeBuilder = (&crscheme.Builder{GroupVersion: GroupVersion}).Register(&MyApp{}, &MyAppList{})
	AddToScheme   = SchemeBuilder.AddToScheme
)

type MyAppSpec struct {
	Replicas    *int32             `json:"replicas,omitempty"`
	Image       string             `json:"image"`
	Port        int32              `json:"port,omitempty"`
	ServiceType corev1.ServiceType `json:"serviceType,omitempty"`
	Env         []corev1.EnvVar    `json:"env,omitempty"`
}

type MyAppStatus struct {
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
	ReadyReplicas      int32              `json:"readyReplicas"`
	AvailableReplicas  int32              `json:"availableReplicas"`
	Selector           string             `json:"selector,omitempty"`
	LastUpdateTime     *metav1.Time       `json:"lastUpdateTime,omitempty"`
}

type MyApp struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   MyAppSpec   `json:"spec"`
	Status MyAppStatus `json:"status,omitempty"`
}

type MyAppList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MyApp `json:"items"`
}

// What controller-gen writes into zz_generated.deepcopy.go, by hand.

func (in *MyApp) DeepCopyInto(out *MyApp) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if in.Spec.Replicas != nil {
		out.Spec.Replicas = new(int32)
		*out.Spec.Replicas = *in.Spec.Replicas
	}
	if in.Spec.Env != nil {
		out.Spec.Env = make([]corev1.EnvVar, len(in.Spec.Env))
		for i := range in.Spec.Env {
			in.Spec.Env[i].DeepCopyInto(&out.Spec.Env[i])
		}
	}
	if in.Status.Conditions != nil {
		out.Status.Conditions = make([]metav1.Condition, len(in.Status.Conditions))
		for i := range in.Status.Conditions {
			in.Status.Conditions[i].DeepCopyInto(&out.Status.Conditions[i])
		}
	}
	if in.Status.LastUpdateTime != nil {
		out.Status.LastUpdateTime = in.Status.LastUpdateTime.DeepCopy()
	}
}

func (in *MyApp) DeepCopy() *MyApp {
	if in == nil {
		return nil
	}
	out := new(MyApp)
	in.DeepCopyInto(out)
	return out
}

func (in *MyApp) DeepCopyObject() runtime.Object { return in.DeepCopy() }

func (in *MyAppList) DeepCopyObject() runtime.Object {
	if in == nil {
		return nil
	}
	out := new(MyAppList)
	*out = *in
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]MyApp, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
	return out
}
