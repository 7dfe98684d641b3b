"""Drives the admin API through a client generated from GET /api/openapi.json by
openapi-python-client (the OpenAPI test generates it into a temporary folder and puts it on
PYTHONPATH as the package `seckill_client`): a merchant creates an item and an activity that
opens in an hour, ops pre-warm it and close its entry. Only the generated functions and
models are used, so a request or an answer the document describes wrongly fails here.

Usage: python3 drive.py BASE_URL MERCHANT_TOKEN OPS_TOKEN
Prints `activity=<id> item=<id> prewarmed=<items> switch=<path>=<value>`.
"""

import sys
from datetime import datetime, timedelta, timezone

from seckill_client import AuthenticatedClient
from seckill_client.api.admin import (
    post_admin_api_activities,
    post_admin_api_activities_id_prewarm,
    post_admin_api_items,
    put_admin_api_switches_path,
)
from seckill_client.models import (
    ActivityInput,
    ActivityItemInput,
    ActivityKind,
    FlipBody,
    ItemInput,
)


def answered(response, what):
    """The parsed body of a success; anything else stops the run, saying what came back."""
    if not 200 <= response.status_code < 300 or response.parsed is None:
        sys.exit(f"{what}: {response.status_code} {response.content!r}")
    return response.parsed


base, merchant_token, ops_token = sys.argv[1:4]
merchant = AuthenticatedClient(base_url=base, token=merchant_token)
ops = AuthenticatedClient(base_url=base, token=ops_token)

item = answered(
    post_admin_api_items.sync_detailed(
        client=merchant,
        body=ItemInput(name="Generated-client kettle", description="made by a generated client", price_cents=12_900),
    ),
    "create the item",
)
opens = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(hours=1)
activity = answered(
    post_admin_api_activities.sync_detailed(
        client=merchant,
        body=ActivityInput(
            title="Generated-client sale",
            starts_at=opens,
            ends_at=opens + timedelta(hours=1),
            kind=ActivityKind.STANDARD,
            pay_timeout_s=900,
            items=[ActivityItemInput(item_id=item.id, stock=25, per_user_limit=1, price_cents=9_900)],
        ),
    ),
    "create the activity",
)
report = answered(
    post_admin_api_activities_id_prewarm.sync_detailed(activity.id, client=ops),
    "pre-warm the activity",
)
path = f"switches/entry/{activity.id}"
change = answered(
    put_admin_api_switches_path.sync_detailed(
        path, client=ops, body=FlipBody(value="closed", reason="closed by the generated client's test")
    ),
    "close the activity's entry",
)
print(f"activity={activity.id} item={item.id} prewarmed={len(report.items)} switch={change.path}={change.new_value}")
