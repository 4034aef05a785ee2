// Command leftovers lists the Kubernetes objects labelled vak.test=1 left
// on the test cluster of $VAK_TEST_KUBECONFIG (namespaces, pods, network
// policies, runtime classes) and exits 1 if there are any: scripts/test
// runs it after the suite, as it checks Docker for leftovers. With -delete
// it also deletes them.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	del := flag.Bool("delete", false, "delete what is left")
	flag.Parse()
	path := os.Getenv("VAK_TEST_KUBECONFIG")
	if path == "" {
		fmt.Fprintln(os.Stderr, "leftovers: VAK_TEST_KUBECONFIG is unset")
		os.Exit(2)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "leftovers:", err)
		os.Exit(2)
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "leftovers:", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sel := metav1.ListOptions{LabelSelector: "vak.test=1"}
	var left []string
	fail := func(what string, err error) {
		fmt.Fprintf(os.Stderr, "leftovers: list %s: %v\n", what, err)
		os.Exit(2)
	}
	nss, err := c.CoreV1().Namespaces().List(ctx, sel)
	if err != nil {
		fail("namespaces", err)
	}
	for _, n := range nss.Items {
		left = append(left, fmt.Sprintf("namespace %s (%s) %v", n.Name, n.Status.Phase, n.Labels))
		if *del {
			c.CoreV1().Namespaces().Delete(ctx, n.Name, metav1.DeleteOptions{})
		}
	}
	pods, err := c.CoreV1().Pods("").List(ctx, sel)
	if err != nil {
		fail("pods", err)
	}
	for _, p := range pods.Items {
		left = append(left, fmt.Sprintf("pod %s/%s (%s) %v", p.Namespace, p.Name, p.Status.Phase, p.Labels))
		if *del {
			c.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{})
		}
	}
	nps, err := c.NetworkingV1().NetworkPolicies("").List(ctx, sel)
	if err != nil {
		fail("network policies", err)
	}
	for _, p := range nps.Items {
		left = append(left, fmt.Sprintf("networkpolicy %s/%s %v", p.Namespace, p.Name, p.Labels))
		if *del {
			c.NetworkingV1().NetworkPolicies(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{})
		}
	}
	rcs, err := c.NodeV1().RuntimeClasses().List(ctx, sel)
	if err != nil {
		fail("runtime classes", err)
	}
	for _, r := range rcs.Items {
		left = append(left, fmt.Sprintf("runtimeclass %s %v", r.Name, r.Labels))
		if *del {
			c.NodeV1().RuntimeClasses().Delete(ctx, r.Name, metav1.DeleteOptions{})
		}
	}
	for _, l := range left {
		fmt.Println(l)
	}
	if len(left) > 0 {
		os.Exit(1)
	}
}
