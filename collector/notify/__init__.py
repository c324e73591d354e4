"""gpufleet.collector.notify: notification channels and the dispatcher that delivers to them."""

from gpufleet.collector.notify.base import DeliveryError, Notification, Notifier
from gpufleet.collector.notify.build import USER_NOTIFIER, build_notifiers
from gpufleet.collector.notify.dispatcher import NotificationDispatcher
from gpufleet.collector.secrets import redact_url

__all__ = ["USER_NOTIFIER", "DeliveryError", "Notification", "NotificationDispatcher", "Notifier",
           "build_notifiers", "redact_url"]
