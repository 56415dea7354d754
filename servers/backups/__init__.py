"""Jobs on a server's data and where backups are kept (docs/backups.md).

`jobs` (backups, restores, wipes and reinstalls the runtime carries out), `storage` (where a
backup is kept: on its node, or in the bucket with object storage configured) and
`object_storage` (the bucket itself, through boto3: only the control plane holds its keys).
"""
