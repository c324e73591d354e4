"""The transport: one agent stream per host, over SSH (asyncssh) or as a local process, into the live view.

- :mod:`.manager`: FleetTransport, one task per host that keeps its stream alive (all the daemon needs);
- :mod:`.ssh`: one SSH session: reach, dial, verify the host key, run the agent;
- :mod:`.local`: ``transport: local``, the agent as a child process;
- :mod:`.stream`: an agent's stdout bytes to validated frames;
- :mod:`.wirefast`: the wire decoder (msgspec for samples, the reference decoder for the rest);
- :mod:`.wirestate`: readers of what the edge noticed about a host's frames;
- :mod:`.budget`: what one host may send;
- :mod:`.hostkeys`: known_hosts, with errors that say what to do;
- :mod:`.reach`: TCP and banner before a connect slot;
- :mod:`.backoff`: reconnect delays with jitter;
- :mod:`.zipapp`: ``agent: upload``, the agent shipped as one zipapp;
- :mod:`.sshlib`: the one import of asyncssh.
"""
