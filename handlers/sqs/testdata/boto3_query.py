# Drives Ferry's SQS face with the boto3 of /usr/bin/python3 (Debian's
# python3-boto3, 1.26: the Query protocol) and prints what it saw as JSON
# for TestBoto3QueryProtocol. The endpoint and the key come from the
# environment (FERRY_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY).
import hashlib, json, os, sys

import boto3, botocore

sqs = boto3.client("sqs", endpoint_url=os.environ["FERRY_URL"], region_name="eu-west-1")
out = {"boto3": boto3.__version__, "botocore": botocore.__version__}

url = sqs.create_queue(QueueName="boto.fifo", Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true",
                       "ReceiveMessageWaitTimeSeconds": "1"}, tags={"team": "billing"})["QueueUrl"]
out["url"] = url
attrs = {"s": {"DataType": "String", "StringValue": "plain ✓"},
         "n": {"DataType": "Number", "StringValue": "-1.5"},
         "b": {"DataType": "Binary", "BinaryValue": b"\x00\x01\xff"}}
sent = sqs.send_message(QueueUrl=url, MessageBody="invoice 7 ✓", MessageGroupId="g", MessageAttributes=attrs)
out["md5_body_ok"] = sent["MD5OfMessageBody"] == hashlib.md5("invoice 7 ✓".encode()).hexdigest()
batch = sqs.send_message_batch(QueueUrl=url, Entries=[
    {"Id": "a", "MessageBody": "second", "MessageGroupId": "g"},
    {"Id": "bad", "MessageBody": "x", "MessageGroupId": "g", "DelaySeconds": 5}])
out["batch_ok"] = [e["Id"] for e in batch.get("Successful", [])]
out["batch_failed"] = [(e["Id"], e["Code"], e["SenderFault"]) for e in batch.get("Failed", [])]

got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"], MessageAttributeNames=["All"])
m = got["Messages"][0]
out["body"] = m["Body"]
out["attrs"] = {k: v.get("StringValue", v.get("BinaryValue", b"").hex()) for k, v in m["MessageAttributes"].items()}
out["group"] = m["Attributes"]["MessageGroupId"]
sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0)
again = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
out["again"] = [x["Body"] for x in again]
deleted = sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": "1", "ReceiptHandle": again[0]["ReceiptHandle"]}])
out["deleted"] = [e["Id"] for e in deleted.get("Successful", [])]

sqs.tag_queue(QueueUrl=url, Tags={"env": "test"})
out["tags"] = sqs.list_queue_tags(QueueUrl=url)["Tags"]
qa = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
out["queue_attrs"] = {k: qa[k] for k in ("FifoQueue", "ContentBasedDeduplication", "ReceiveMessageWaitTimeSeconds")}
try:
    sqs.get_queue_url(QueueName="nope")
except sqs.exceptions.QueueDoesNotExist as e:
    out["missing"] = e.response["Error"]["Code"]
sqs.delete_queue(QueueUrl=url)
out["listed_after_delete"] = sqs.list_queues().get("QueueUrls", [])
json.dump(out, sys.stdout)
