"""Runs a notebook with nbclient, its kernel in cellbox through jupyter_server's gateway
kernel manager (Debian's python3-nbclient and python3-jupyter-server), as papermill and
Airflow run them. Prints one JSON line: the executed notebook's outputs and the kernel id.

Environment: GATEWAY_URL, GATEWAY_TOKEN.
"""
import json
import os
import sys

import nbclient
import nbformat
from jupyter_server.gateway.managers import GatewayClient, GatewayKernelManager

gw = GatewayClient.instance()
gw.url = os.environ["GATEWAY_URL"]
gw.auth_token = os.environ["GATEWAY_TOKEN"]

nb = nbformat.v4.new_notebook(cells=[
    nbformat.v4.new_markdown_cell("# A notebook whose kernel is a cellbox sandbox"),
    nbformat.v4.new_code_cell("import os, platform\nrows = [3, 1, 2]\nprint('sum', sum(rows), 'in', os.getcwd())"),
    nbformat.v4.new_code_cell("import matplotlib.pyplot as plt\nplt.plot(sorted(rows))\nplt.show()"),
    nbformat.v4.new_code_cell("{'max': max(rows)}"),
])
client = nbclient.NotebookClient(nb, kernel_name="python3", kernel_manager_class=GatewayKernelManager, timeout=120)
kernel_id = None


def remember(**kw):
    global kernel_id
    kernel_id = client.km.kernel_id


client.on_notebook_start = remember
client.execute()
nbformat.validate(nb)

failing = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1/0"), nbformat.v4.new_code_cell("print('not reached')")])
raised = ""
try:
    nbclient.NotebookClient(failing, kernel_name="python3", kernel_manager_class=GatewayKernelManager, timeout=120).execute()
except nbclient.exceptions.CellExecutionError as e:
    raised = e.ename

json.dump({"kernel_id": kernel_id, "cells": [c.get("outputs", []) for c in nb.cells], "counts": [c.get("execution_count") for c in nb.cells],
           "raised": raised, "not_reached": failing.cells[1].outputs}, sys.stdout)
