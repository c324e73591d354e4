"""Notifications: the channels, the dispatcher that delivers to them, and what each message says.

- :mod:`.base`: the Notification and the Notifier interface, and each notifier's filter;
- :mod:`.build`: notifier configs to notifier objects (secrets resolved here only), and users' addresses;
- :mod:`.dispatcher`: delivery off the engine's path, with retries, through the notification log;
- :mod:`.nflog`: the notification log (what each destination accepted, and since when it refuses);
- :mod:`.message`: how a notification reads (chat text, webhook JSON, Alertmanager alerts);
- :mod:`.webhook`, :mod:`.alertmanager`, :mod:`.command`, :mod:`.apprise_notifier`: the channels;
- :mod:`.http`: the JSON POST the HTTP channels share;
- :mod:`.jobnotes`: the end-of-job note to a job's user;
- :mod:`.reports`: a waste report as a notification, delivered now.
"""
