"""Places in the race queue, counted per client, so that no visitor can hold the room.

Gradio's own session hash is chosen by the client: a script that sends a new one with every request looks like a
new visitor each time, and could fill the whole queue. So a hosted server counts a client's places by what the
client cannot choose: the logged-in user where there is one, else the network address the request came from (behind
a Space's proxy, the address that proxy saw). A client already holding its share of places is refused at the
queue's door, before it takes a place, with SpecViz's message.

The counts are read from the queue itself each time (its waiting events and its running ones), never
kept beside it, so a place is free again the moment Gradio lets go of the event (finished, cancelled,
or its client gone), and nothing can drift.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

RACE_QUEUE = "race"   # the concurrency id the page's race and `/race` share (`wiring.wire`)


@dataclass(frozen=True)
class PlacesPolicy:
    """How many places in the race queue one client may hold at once (waiting or running)."""

    per_address: int          # visitors who are not logged in, by network address
    per_user: int             # a logged-in Hugging Face user, whatever address they come from
    trusted_proxies: int = 0  # proxies in front of the app that append to X-Forwarded-For (a Space: 1)

    def limit(self, key: str) -> int:
        """The places `key` (from `client_key`) may hold."""
        return self.per_user if key.startswith("user:") else self.per_address

    def message(self, key: str) -> str:
        who = "your account" if key.startswith("user:") else "your network address"
        return (f"this server holds at most {self.limit(key)} queued or running races for {who}, and they are all "
                "taken: wait for one to finish, then start again")


def client_key(username: str | None, headers, client, trusted_proxies: int = 0) -> str:
    """Who holds a place: 'user:NAME' when logged in, else 'addr:IP' (`headers` and `client` as a
    Starlette request has them).

    Behind `trusted_proxies` proxies that each append the address they saw to X-Forwarded-For, the
    address the outermost trusted proxy saw is the header's `trusted_proxies`-th entry from the right:
    entries left of it were written by the client and prove nothing."""
    if username:
        return f"user:{username}"
    forwarded = [part.strip() for part in ((headers or {}).get("x-forwarded-for") or "").split(",") if part.strip()]
    if trusted_proxies > 0 and forwarded:
        return f"addr:{forwarded[-min(trusted_proxies, len(forwarded))]}"
    return f"addr:{getattr(client, 'host', None) or 'unknown'}"


def running_events(queue, concurrency_id: str = RACE_QUEUE) -> list:
    """The events of one concurrency id Gradio is running now (its client gone or not)."""
    return [event for jobs in queue.active_jobs if jobs for event in jobs if event.concurrency_id == concurrency_id]


def queue_events(queue, concurrency_id: str = RACE_QUEUE) -> list:
    """The events of one concurrency id that hold a place now: waiting in Gradio's queue, or running."""
    waiting = getattr(queue.event_queue_per_concurrency_id.get(concurrency_id), "queue", [])
    return [*waiting, *(event for event in running_events(queue, concurrency_id) if event.alive)]


def session_connected(queue, session_hash: str, concurrency_id: str = RACE_QUEUE) -> bool:
    """False once Gradio has let go of every running event of this session (its client disconnected: the
    event stream closed, and Gradio marks the session's jobs no longer alive). A plain function (`/race`)
    is not stopped by Gradio when that happens, so the race asks this between its steps."""
    mine = [event for event in running_events(queue, concurrency_id) if event.session_hash == session_hash]
    return not mine or any(event.alive for event in mine)


def places_held(queue, key: str, trusted_proxies: int, concurrency_id: str = RACE_QUEUE) -> int:
    """How many places `key` holds; the login rides on the event, the address on its join request."""
    return sum(1 for event in queue_events(queue, concurrency_id)
               if client_key(event.username, getattr(event.request, "headers", None),
                             getattr(event.request, "client", None), trusted_proxies) == key)


def guard_queue(demo, policy: PlacesPolicy, concurrency_id: str = RACE_QUEUE) -> None:
    """Refuse a race from a client that already holds its places, at the queue's door.

    Gradio has no hook for this (its `validator` runs after the join and sees no other events), so the
    queue's `push` is wrapped on this app's own queue object: the count and the push happen under one
    lock, so two joins from one client at the same instant cannot both take the last place."""
    queue = demo._queue
    push = queue.push
    lock = asyncio.Lock()

    async def guarded_push(body, request, username):
        fn = demo.fns.get(getattr(body, "fn_index", None))
        if fn is None or fn.concurrency_id != concurrency_id:
            return await push(body=body, request=request, username=username)
        key = client_key(username, request.headers, request.client, policy.trusted_proxies)
        async with lock:
            if places_held(queue, key, policy.trusted_proxies, concurrency_id) >= policy.limit(key):
                return False, policy.message(key), "queue_full"
            return await push(body=body, request=request, username=username)

    queue.push = guarded_push
