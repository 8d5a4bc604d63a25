// A small blocking HTTP/1.1 client (placeholder; filled in by the backend-calls work).
import Networking

