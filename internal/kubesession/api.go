package kubesession

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// api is the few calls sessions make, over client-go's REST client with a
// scheme of the four API groups they use, built on first use. The typed
// clientset is not used: its scheme registers every API group when vak
// starts, which cost every vak process (each command, each re-executed
// sandbox stage) 0.7 MB of allocations and milliseconds before main
// (internal/cli's TestInitAllocations measures it).
type api struct {
	core, networking, node, apps *rest.RESTClient
	params                       runtime.ParameterCodec
}

// scheme is the API groups of sessions: core, networking, node and apps
// (the gateway's Deployment) (and
// meta's options and statuses).
var scheme = sync.OnceValue(func() *runtime.Scheme {
	s := runtime.NewScheme()
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, networkingv1.AddToScheme, nodev1.AddToScheme, appsv1.AddToScheme} {
		if err := add(s); err != nil {
			panic("kubesession: scheme: " + err.Error())
		}
	}
	return s
})

// newAPI makes the REST clients of cfg for each group.
func newAPI(cfg *rest.Config) (*api, error) {
	s := scheme()
	codecs := serializer.NewCodecFactory(s).WithoutConversion()
	client := func(apiPath string, gv schema.GroupVersion) (*rest.RESTClient, error) {
		c := rest.CopyConfig(cfg)
		c.APIPath, c.GroupVersion, c.NegotiatedSerializer = apiPath, &gv, codecs
		if c.UserAgent == "" {
			c.UserAgent = "vak"
		}
		return rest.RESTClientFor(c)
	}
	a := &api{params: runtime.NewParameterCodec(s)}
	var err error
	if a.core, err = client("/api", corev1.SchemeGroupVersion); err != nil {
		return nil, err
	}
	if a.networking, err = client("/apis", networkingv1.SchemeGroupVersion); err != nil {
		return nil, err
	}
	if a.node, err = client("/apis", nodev1.SchemeGroupVersion); err != nil {
		return nil, err
	}
	if a.apps, err = client("/apis", appsv1.SchemeGroupVersion); err != nil {
		return nil, err
	}
	return a, nil
}

func (a *api) createPod(ctx context.Context, ns string, p *corev1.Pod) (*corev1.Pod, error) {
	out := &corev1.Pod{}
	return out, a.core.Post().Namespace(ns).Resource("pods").Body(p).Do(ctx).Into(out)
}

func (a *api) getPod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	out := &corev1.Pod{}
	return out, a.core.Get().Namespace(ns).Resource("pods").Name(name).Do(ctx).Into(out)
}

func (a *api) listPods(ctx context.Context, ns string, opts metav1.ListOptions) (*corev1.PodList, error) {
	out := &corev1.PodList{}
	return out, a.core.Get().Namespace(ns).Resource("pods").VersionedParams(&opts, a.params).Do(ctx).Into(out)
}

func (a *api) watchPods(ctx context.Context, ns string, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return a.core.Get().Namespace(ns).Resource("pods").VersionedParams(&opts, a.params).Watch(ctx)
}

func (a *api) deletePod(ctx context.Context, ns, name string, opts metav1.DeleteOptions) error {
	return a.core.Delete().Namespace(ns).Resource("pods").Name(name).Body(&opts).Do(ctx).Error()
}

func (a *api) createNetworkPolicy(ctx context.Context, ns string, np *networkingv1.NetworkPolicy) error {
	return a.networking.Post().Namespace(ns).Resource("networkpolicies").Body(np).Do(ctx).Error()
}

func (a *api) deleteNetworkPolicy(ctx context.Context, ns, name string) error {
	return a.networking.Delete().Namespace(ns).Resource("networkpolicies").Name(name).Do(ctx).Error()
}

func (a *api) getNamespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	out := &corev1.Namespace{}
	return out, a.core.Get().Resource("namespaces").Name(name).Do(ctx).Into(out)
}

func (a *api) listNodes(ctx context.Context) (*corev1.NodeList, error) {
	out := &corev1.NodeList{}
	return out, a.core.Get().Resource("nodes").Do(ctx).Into(out)
}

func (a *api) getRuntimeClass(ctx context.Context, name string) (*nodev1.RuntimeClass, error) {
	out := &nodev1.RuntimeClass{}
	return out, a.node.Get().Resource("runtimeclasses").Name(name).Do(ctx).Into(out)
}

func (a *api) serverVersion(ctx context.Context) (*version.Info, error) {
	raw, err := a.core.Get().AbsPath("/version").Do(ctx).Raw()
	if err != nil {
		return nil, err
	}
	var v version.Info
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("server version: %w", err)
	}
	return &v, nil
}

// podRequest is a subresource request (exec, attach) of pod with opts as
// its parameters.
func (a *api) podRequest(ns, pod, sub string, opts runtime.Object) *rest.Request {
	return a.core.Post().Resource("pods").Namespace(ns).Name(pod).SubResource(sub).VersionedParams(opts, a.params)
}
