package main

// cloudStorageFiles are cloud storage and messaging connection strings (Azure Storage accounts,
// shared access signatures, Service Bus) in each context they leak from: .env lines, YAML, JSON
// values under keys that name no secret, and the stack traces of a client that failed to parse
// one.
func cloudStorageFiles() []positiveFile {
	return []positiveFile{
		{"positive/env/azure-functions.env", tmpl(`# Azure Functions host settings, exported from the portal on «ts:date».
FUNCTIONS_WORKER_RUNTIME=dotnet-isolated
FUNCTIONS_EXTENSION_VERSION=~4
WEBSITE_RUN_FROM_PACKAGE=1
AzureWebJobsStorage=DefaultEndpointsProtocol=https;AccountName=nwfuncsprod;AccountKey=«azure-storage-account-key»;EndpointSuffix=core.windows.net
ServiceBusConnection="Endpoint=sb://nw-orders.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=«azure-shared-access-key»"
ASSETS_CONNECTION='BlobEndpoint=https://nwassets.blob.core.windows.net/;SharedAccessSignature=«azure-sas-token»'
APPLICATIONINSIGHTS_CONNECTION_STRING=InstrumentationKey=«uuid»;IngestionEndpoint=https://westeurope-5.in.applicationinsights.azure.com/
`)},
		{"positive/yaml/azure-blob-exporter.yaml", tmpl(`# values for the blob exporter chart
image:
  repository: northwind/blob-exporter
  tag: "2.4.1"
exporter:
  interval: 5m
  containers: [invoices, exports, audit]
  storage:
    connectionString: "DefaultEndpointsProtocol=https;AccountName=nwexports;AccountKey=«azure-storage-account-key»;EndpointSuffix=core.windows.net"
  archive:
    connection_string: BlobEndpoint=https://nwarchive.blob.core.windows.net/;SharedAccessSignature=«azure-sas-token»
resources:
  limits: {cpu: 200m, memory: 256Mi}
`)},
		{"positive/config/appsettings.Production.json", tmpl(`{
  "Logging": {"LogLevel": {"Default": "Information", "Microsoft.AspNetCore": "Warning"}},
  "AllowedHosts": "*",
  "ConnectionStrings": {
    "Blobs": "DefaultEndpointsProtocol=https;AccountName=nwcatalog;AccountKey=«azure-storage-account-key»;EndpointSuffix=core.windows.net",
    "Events": "Endpoint=sb://nw-catalog.servicebus.windows.net/;SharedAccessKeyName=send;SharedAccessKey=«azure-shared-access-key»;EntityPath=catalog-events"
  },
  "Catalog": {"PageSize": 50, "ImageContainer": "product-images"}
}
`)},
		{"positive/traces/azure-storage-dotnet.txt", tmpl(`Unhandled exception. System.FormatException: No valid combination of account information found.
   at Azure.Storage.StorageConnectionString.<>c.<Parse>b__67_0(String err)
   at Azure.Storage.StorageConnectionString.ParseCore(String connectionString, StorageConnectionString& accountInformation, Action` + "`" + `1 error)
   at Azure.Storage.Blobs.BlobServiceClient..ctor(String connectionString, BlobClientOptions options)
   at Northwind.Reports.BlobStore..ctor(IConfiguration config) in /src/Reports/BlobStore.cs:line 31
 connectionString = "DefaultEndpointsProtocol=https;AccountName=nwreports;AccountKey=«azure-storage-account-key»;EndpointSuffix=core.windows.net;"
   at Northwind.Reports.Program.Main(String[] args) in /src/Reports/Program.cs:line 18
Traceback (most recent call last):
  File "/app/sync.py", line 42, in <module>
    client = BlobServiceClient.from_connection_string(os.environ["SYNC_CONNECTION"])
  File "/usr/local/lib/python3.12/site-packages/azure/storage/blob/_blob_service_client.py", line 187, in from_connection_string
    account_url, secondary, credential = parse_connection_str(conn_str, credential, 'blob')
ValueError: Connection string is either blank or malformed: 'BlobEndpoint=https://nwsync.blob.core.windows.net/;SharedAccessSignature=«azure-sas-token»;Extra'
`)},
	}
}
