"""Who may name a node anyway: the one exemption rule of the nodeName policy, in Python for the
webhook (exemption), in CEL for the registrations and in-server checks (not_exempt), and as the
audit and `check` can judge it without seeing the requester (vouched_requester, unvouched_claim).

The fields that mark a mirror or DaemonSet pod are written by whoever creates the pod, so only
who creates it decides, as NodeRestriction decides for nodes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from volcano_guard.base.jsonbody import object_at
from volcano_guard.webhook.cel import all_of, namespace_in, negate, string, user_in
from volcano_guard.webhook.policies.node_name.settings import NodeNameConfig, with_settings
from volcano_guard.webhook.review import UserInfo

if TYPE_CHECKING:  # config.py gathers the policies' sections: at run time, it imports this
    from volcano_guard.webhook.config import Config

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
# A kubelet's identity (the Node authorizer's): user system:node:<node> in group system:nodes.
NODES_GROUP, NODE_USER_PREFIX = "system:nodes", "system:node:"


def exemption(
    pod: dict[str, Any], user: UserInfo, namespace: str, config: NodeNameConfig
) -> str | None:
    """Why a pod CREATE by user may name its node ('static pod', 'DaemonSet pod', 'namespace',
    'user'), or None. The one rule; not_exempt() holds it in CEL, and the audit and `check` ask
    it with the requester the cluster (or nothing) vouches for."""
    if static_pod_of_its_node(pod, user):
        return "static pod"
    if config.allowDaemonSets and daemonset_pod_of_its_controller(pod, user, config):
        return "DaemonSet pod"
    if namespace in config.exemptNamespaces:
        return "namespace"
    if user.username in config.exemptUsers or set(user.groups) & set(config.exemptGroups):
        return "user"
    return None


def exempt_own_namespace(config: Config, namespace: str | None) -> Config:
    """config with the guard's own namespace exempt, so that it can always repair itself."""
    exempt = config.policies.nodeName.exemptNamespaces
    if not namespace or namespace in exempt:
        return config
    return with_settings(config, exemptNamespaces=(*exempt, namespace))


def static_pod_of_its_node(pod: dict[str, Any], user: UserInfo) -> bool:
    """A mirror pod created by the kubelet of the node it names: NodeRestriction lets a node
    create nothing else, and the annotation alone anyone may write."""
    return (
        MIRROR_ANNOTATION in object_at(object_at(pod, "metadata"), "annotations")
        and NODES_GROUP in user.groups
        and user.username == NODE_USER_PREFIX + str(object_at(pod, "spec").get("nodeName"))
    )


def daemonset_pod_of_its_controller(
    pod: dict[str, Any], user: UserInfo, config: NodeNameConfig
) -> bool:
    """A pod created by the DaemonSet controller, controlled by an apps/v1 DaemonSet."""
    return user.username in config.daemonSetControllers and daemonset_owner(pod) is not None


def daemonset_owner(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The pod's controlling apps/v1 DaemonSet owner reference, if it names one."""
    owners = object_at(pod, "metadata").get("ownerReferences")
    for owner in owners if isinstance(owners, list) else ():
        if (
            isinstance(owner, dict)
            and owner.get("apiVersion") == "apps/v1"
            and owner.get("kind") == "DaemonSet"
            and owner.get("controller") is True
        ):
            return owner
    return None


def not_exempt(config: NodeNameConfig) -> tuple[str, ...]:
    """CEL conditions, over `object` (a pod) and `request`, all true when exemption() exempts
    nothing."""
    return (
        negate(namespace_in(config.exemptNamespaces)),
        negate(user_in(config.exemptUsers, config.exemptGroups)),
        negate(_STATIC_POD_OF_ITS_NODE),
        negate(_daemonset_pod_of_its_controller(config) if config.allowDaemonSets else ""),
    )


_STATIC_POD_OF_ITS_NODE = (
    f"has(object.metadata.annotations) && {string(MIRROR_ANNOTATION)} in "
    f"object.metadata.annotations && has(request.userInfo.groups) && "
    f"{string(NODES_GROUP)} in request.userInfo.groups && "
    f"request.userInfo.username == {string(NODE_USER_PREFIX)} + object.spec.nodeName"
)


def _daemonset_pod_of_its_controller(config: NodeNameConfig) -> str:
    return (
        all_of(
            user_in(config.daemonSetControllers, ()),
            "has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(o, "
            "has(o.apiVersion) && o.apiVersion == 'apps/v1' && o.kind == 'DaemonSet' && "
            "has(o.controller) && o.controller == true)",
        )
        if config.daemonSetControllers
        else "false"
    )


def unvouched_claim(pod: dict[str, Any], config: NodeNameConfig) -> str | None:
    """What the pod claims to be that only its requester can confirm, said for a reader who
    cannot see the requester (`check`); None when it claims nothing."""
    if MIRROR_ANNOTATION in object_at(object_at(pod, "metadata"), "annotations"):
        node = object_at(pod, "spec").get("nodeName")
        return (
            f"it is a mirror pod, exempt only when created by node {node}'s kubelet "
            f"(user {NODE_USER_PREFIX}{node} in {NODES_GROUP}), which cannot be judged "
            "offline"
        )
    if config.allowDaemonSets and daemonset_owner(pod) is not None:
        controllers = ", ".join(config.daemonSetControllers) or "no one (daemonSetControllers)"
        return (
            f"it names a DaemonSet owner, exempt only when created by {controllers}, "
            "which cannot be judged offline"
        )
    return None


def vouched_requester(
    pod: dict[str, Any],
    node_uids: Mapping[str, Any],
    daemonset_uids: Mapping[tuple[str, str], Any],
    config: NodeNameConfig,
) -> tuple[UserInfo, str]:
    """Who the cluster shows created a bound pod, for the audit to ask exemption() with: its
    node, for a mirror pod owned by that Node (as NodeRestriction makes a kubelet create it);
    the DaemonSet controller, for a pod controlled by a DaemonSet that exists with that uid;
    else nobody. And, when the pod claims to be one of these and the cluster says otherwise,
    the finding's text."""
    metadata = object_at(pod, "metadata")
    node = str(object_at(pod, "spec").get("nodeName"))
    owners = metadata.get("ownerReferences")
    owners = owners if isinstance(owners, list) else []
    if MIRROR_ANNOTATION in object_at(metadata, "annotations"):
        node_owner = {
            "apiVersion": "v1",
            "kind": "Node",
            "name": node,
            "controller": True,
            "uid": node_uids.get(node),
        }
        if node_uids.get(node) and any(
            isinstance(o, dict) and node_owner.items() <= o.items() for o in owners
        ):
            return UserInfo(NODE_USER_PREFIX + node, (NODES_GROUP,)), ""
        return UserInfo(), (
            f"has the mirror-pod annotation {MIRROR_ANNOTATION} but is not owned by node "
            f'"{node}" as a static pod its kubelet created is: someone else wrote it, and '
            "the guard does not exempt it; delete the pod"
        )
    owner = daemonset_owner(pod) if config.allowDaemonSets else None
    if owner is None:
        return UserInfo(), ""
    key = (str(metadata.get("namespace", "") or ""), str(owner.get("name")))
    if daemonset_uids.get(key) and daemonset_uids.get(key) == owner.get("uid"):
        controllers = config.daemonSetControllers
        return UserInfo(controllers[0] if controllers else ""), ""
    return UserInfo(), (
        f'names DaemonSet "{key[1]}" (uid {owner.get("uid")}) as its controller, which does '
        "not exist: the guard does not exempt it, and the garbage collector deletes the pods of "
        "a deleted DaemonSet; delete the pod"
    )
