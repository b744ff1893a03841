"""Scrapes `ackscope watch --metrics` as Prometheus would, for the tests of `--metrics`, and reads
the answer with Prometheus's own parser (the prometheus_client package's
text_string_to_metric_families; Debian's python3-prometheus-client).

    scrape.py URL [--token TOKEN] [--host HOST]
        prints one JSON object: the answer's status and headers (names in lower case) and, for
        a 200, each family's type and every sample as [name, labels, value], as parsed.
"""

import argparse
import json
import sys
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--token")
    parser.add_argument("--host")
    args = parser.parse_args()
    request = urllib.request.Request(args.url)
    if args.token is not None:
        request.add_header("Authorization", "Bearer " + args.token)
    if args.host is not None:
        request.add_header("Host", args.host)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status, headers, body = response.status, response.headers, response.read()
    except urllib.error.HTTPError as refused:
        status, headers, body = refused.code, refused.headers, refused.read()
    out = {"status": status, "headers": {k.lower(): v for k, v in headers.items()}}
    if status == 200:
        families = list(text_string_to_metric_families(body.decode("utf-8")))
        out["types"] = {family.name: family.type for family in families}
        out["samples"] = [
            [sample.name, sample.labels, sample.value]
            for family in families
            for sample in family.samples
        ]
    else:
        out["body"] = body.decode("utf-8", "replace")
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
